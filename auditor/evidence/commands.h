// The commands that read an evidence database and never write it:
// `findings` (incidents per campaign with its verdict and the error beside
// it, or raw finding rows; boundary and truncation rows with the prompt
// tokens sent, reported and the limit) and `verify`
// (the hash chain, and with checkpoints the Merkle log: storage/
// evidence_tlog.h). Both open the file read-only (storage/evidence_store.h
// OpenReadOnly), so they work on read-only media, and both name campaigns
// that started and never ended: "interrupted" when no writer holds the
// database, "no end recorded yet" while one does.
#ifndef KVCANARY_AUDITOR_EVIDENCE_COMMANDS_H_
#define KVCANARY_AUDITOR_EVIDENCE_COMMANDS_H_

#include <string>

namespace kvcanary::auditor {

struct FindingsOptions {
  std::string db;
  std::string campaign;          // only this one; empty: all
  std::string format = "table";  // table or json
  bool rows = false;             // raw finding rows instead of incidents
  int max_lines = 50;            // incident lines per campaign
};
// Prints the incidents (or rows); 0, or 2 with a message on stderr.
int FindingsCommand(const FindingsOptions& o);

struct VerifyOptions {
  std::string db;
  std::string checkpoint;  // a checkpoint file or directory; empty: none
  std::string pubkey;      // required with a checkpoint
};
// 0 verified, 1 verification failed (names the first bad or diverging
// row), 2 error. Without a checkpoint it checks the hash chain only and
// says what that cannot detect.
int VerifyCommand(const VerifyOptions& o);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_EVIDENCE_COMMANDS_H_
