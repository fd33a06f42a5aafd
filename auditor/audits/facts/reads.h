// The GET reads of `kvcanary-auditor facts`: which endpoints of the target
// (and of engine nodes given with --trace) it reads, as whom, and what one
// read got back. A read keeps the body in memory only, to be parsed and
// scanned; what it records is the status, size, SHA-256 and a few headers,
// never the text (docs/facts.md).
#ifndef KVCANARY_AUDITOR_AUDITS_FACTS_READS_H_
#define KVCANARY_AUDITOR_AUDITS_FACTS_READS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// The reader of an endpoint read without any key.
inline constexpr char kNoKeyReader[] = "(no key)";

// The target's endpoints `facts` reads, GET only (docs/targets.md: the
// info, props, version, metrics and slots endpoints of vLLM, SGLang,
// llama.cpp, TGI, Ollama and kvcanary). Never a mutating one.
const std::vector<std::string>& FactsTargetPaths();
// An engine node's endpoints (--trace), besides /v1/trace, which is
// followed as a stream rather than read.
const std::vector<std::string>& FactsNodePaths();

struct ReadSpec {
  std::string base;     // the target's or a node's base URL
  std::string path;     // e.g. "/slots"
  std::string reader;   // kNoKeyReader or a tenant's name
  std::string api_key;  // "" for no key
  bool node = false;    // an engine node's endpoint (--trace)
};

struct EndpointRead {
  ReadSpec spec;
  bool after_plant = false;
  int status = 0;     // 0: no HTTP answer
  std::string error;  // why not, when status is 0
  // The raw answer: parsed and scanned in memory, never recorded.
  std::string body;
  std::string sha256;  // of body
  // Response headers, names lower-cased.
  std::map<std::string, std::string> headers;
  double ms = 0;

  bool answered() const { return status > 0; }
  // Its evidence row: the body's hash and size, never the body.
  nlohmann::json Evidence() const;
};

// Reads every spec (four at a time), each bounded by `timeout`, and
// returns the reads in the order of `specs`.
std::vector<EndpointRead> ReadEndpoints(const std::vector<ReadSpec>& specs,
                                        absl::Duration timeout,
                                        bool after_plant);

// "GET /slots" for the target's, "GET http://127.0.0.1:9/health" for a
// node's: how checks, findings and the details name an endpoint.
std::string EndpointName(const ReadSpec& spec);

// The response headers worth recording of `headers`: all but the
// transport's own (date, content-length, content-type, connection,
// keep-alive, transfer-encoding); cookie values replaced by their SHA-256,
// request ids by "(per request)".
std::map<std::string, std::string> RevealingHeaders(
    const std::map<std::string, std::string>& headers);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_FACTS_READS_H_
