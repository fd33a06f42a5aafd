// Mutual TLS on the internal plane (docs/nodes.md, "Mutual TLS"), against
// `kvcanary-engine up --tls` as separate processes: tenants are served as
// before; a client without the deployment's certificate, with another CA's,
// or speaking plain HTTP gets nothing from any node listener or the KV
// port; the deployment's certificate alone does not replace the internal
// secret.
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/tls.h"
#include "engine/nodes/node_common.h"
#include "engine/transfer/internal_auth.h"
#include "engine/transfer/kv_connection.h"
#include "gtest/gtest.h"
#include "tests/common/tls_fixtures.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

using nlohmann::json;

// The directory `up` generated its secrets and certificates into.
std::string UpDir(const Cluster& c) {
  const std::string& f = c.trace_token_file();
  return f.substr(0, f.rfind('/'));
}

// Whether a GET over `client` got any HTTP answer; its status in *status.
bool Answered(httplib::ClientImpl& client, const std::string& path,
              const std::string& secret, int* status) {
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(5, 0);
  httplib::Headers h;
  if (!secret.empty()) h.emplace("Authorization", "Bearer " + secret);
  auto res = client.Get(path.c_str(), h);
  if (!res) return false;
  *status = res->status;
  return true;
}

class MutualTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new Cluster({"--tls"}); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(cluster_->ok());
    const std::string dir = UpDir(*cluster_);
    files_ = {dir + "/node.pem", dir + "/node.key", dir + "/ca.pem"};
    auto ctx = tls::Context::Load(files_);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = *ctx;
  }
  engine::NodeUrl Parse(const std::string& url) {
    auto parsed = engine::ParseNodeUrl(url, ctx_.get());
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return parsed.ok() ? *parsed : engine::NodeUrl();
  }
  std::string Metrics(const std::string& node) {
    auto client = engine::NodeClient(node, ctx_.get());
    auto res = client->Get("/metrics");
    return res ? res->body : "";
  }

  inline static Cluster* cluster_ = nullptr;
  tls::Files files_;
  std::shared_ptr<const tls::Context> ctx_;
};

TEST_F(MutualTlsTest, NodesAreHttpsAndTenantsAreServedAsBefore) {
  EXPECT_EQ(cluster_->prefill().rfind("https://", 0), 0u)
      << cluster_->prefill();
  EXPECT_EQ(cluster_->decode().rfind("https://", 0), 0u) << cluster_->decode();
  // The router's own listener stays plain HTTP for its clients.
  EXPECT_EQ(cluster_->router().rfind("http://", 0), 0u);
  for (int i = 0; i < 3; ++i) {
    HttpResult r = Post(cluster_->router(), "/v1/completions",
                        Completion("Once upon a time", 8, 0.0), "sk-acme");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["usage"]["completion_tokens"], 8) << r.body;
  }
  // Every KV transfer went over TLS and none was refused.
  EXPECT_EQ(Metrics(cluster_->decode())
                .find("kvcanary_node_kv_connections_refused_total{"),
            std::string::npos);
}

TEST_F(MutualTlsTest, ANodeListenerAnswersNothingWithoutTheCertificate) {
  for (const std::string& node : {cluster_->prefill(), cluster_->decode()}) {
    SCOPED_TRACE(node);
    const engine::NodeUrl u = Parse(node);
    int status = 0;
    // Trusts the server, presents no certificate.
    httplib::SSLClient anonymous(u.host, u.port);
    anonymous.set_ca_cert_path(files_.ca.c_str());
    anonymous.enable_server_certificate_verification(true);
    EXPECT_FALSE(Answered(anonymous, "/health", "", &status)) << status;
    EXPECT_FALSE(Answered(anonymous, "/internal/v1/limits",
                          cluster_->internal_secret(), &status))
        << status;
    // Plain HTTP to the TLS port.
    httplib::ClientImpl plain(u.host, u.port);
    EXPECT_FALSE(Answered(plain, "/health", "", &status)) << status;
  }
}

TEST_F(MutualTlsTest, ANodeListenerRefusesAnotherCasCertificate) {
  tls::testing::Deployment other;
  // The attacker trusts our CA (it is public to them) but holds a
  // certificate of its own CA.
  const std::string both = other.dir + "/garbage.pem";
  {
    std::ofstream out(both);
    out << std::ifstream(files_.ca).rdbuf()
        << std::ifstream(other.files.ca).rdbuf();
  }
  auto foreign = tls::Context::Load({other.files.cert, other.files.key, both});
  ASSERT_TRUE(foreign.ok()) << foreign.status();
  for (const std::string& node : {cluster_->prefill(), cluster_->decode()}) {
    SCOPED_TRACE(node);
    const engine::NodeUrl u = Parse(node);
    httplib::SSLClient client(u.host, u.port, (*foreign)->cert(),
                              (*foreign)->key());
    client.set_ca_cert_path(both.c_str());
    client.enable_server_certificate_verification(true);
    int status = 0;
    EXPECT_FALSE(Answered(client, "/internal/v1/limits",
                          cluster_->internal_secret(), &status))
        << status;
  }
}

TEST_F(MutualTlsTest, TheCertificateAloneDoesNotReplaceTheInternalSecret) {
  for (const std::string& node : {cluster_->prefill(), cluster_->decode()}) {
    SCOPED_TRACE(node);
    auto client = engine::NodeClient(node, ctx_.get());
    int status = 0;
    ASSERT_TRUE(Answered(*client, "/health", "", &status));
    EXPECT_EQ(status, 200);
    ASSERT_TRUE(Answered(*client, "/internal/v1/limits", "", &status));
    EXPECT_EQ(status, 401);
    ASSERT_TRUE(Answered(*client, "/internal/v1/limits",
                         cluster_->internal_secret(), &status));
    EXPECT_EQ(status, 200);
    ASSERT_TRUE(Answered(*client, "/v1/trace", "", &status));
    EXPECT_EQ(status, 401);
  }
}

TEST_F(MutualTlsTest, TheKvPortSendsNothingWithoutTheCertificate) {
  const std::string before = Metrics(cluster_->decode());
  // Plain TCP: the node waits for a TLS ClientHello and never sends its
  // Hello.
  auto plain = engine::kv::FrameConnection::Connect(
      "127.0.0.1", cluster_->kv_port(), absl::Seconds(5));
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto hello = (*plain)->Receive(absl::Seconds(5));
  EXPECT_FALSE(hello.ok());
  EXPECT_NE(hello.status().code(), absl::StatusCode::kDeadlineExceeded)
      << "the node should drop the connection at its handshake deadline";

  // Another CA's certificate: refused in the handshake.
  tls::testing::Deployment other;
  auto foreign = tls::Context::Load(other.files);
  ASSERT_TRUE(foreign.ok());
  auto refused = engine::kv::FrameConnection::Connect(
      "127.0.0.1", cluster_->kv_port(), absl::Seconds(5), foreign->get());
  EXPECT_FALSE(refused.ok());

  // The deployment's certificate: the node's Hello arrives, and the secret
  // is still required after it.
  auto ok = engine::kv::FrameConnection::Connect(
      "127.0.0.1", cluster_->kv_port(), absl::Seconds(5), ctx_.get());
  ASSERT_TRUE(ok.ok()) << ok.status();
  auto greeted = (*ok)->Receive(absl::Seconds(5));
  ASSERT_TRUE(greeted.ok()) << greeted.status();
  ASSERT_TRUE(std::holds_alternative<engine::kv::Hello>(*greeted));
  const engine::SharedSecret wrong =
      engine::SharedSecret::FromString(std::string(64, '0'));
  const auto& nonce = std::get<engine::kv::Hello>(*greeted).nonce;
  ASSERT_TRUE(
      (*ok)
          ->Send(engine::kv::Auth{wrong.KvProof(nonce)}, absl::Seconds(5))
          .ok());
  auto verdict = (*ok)->Receive(absl::Seconds(5));
  if (verdict.ok()) {
    EXPECT_TRUE(std::holds_alternative<engine::kv::Abort>(*verdict));
  }

  const std::string after = Metrics(cluster_->decode());
  EXPECT_NE(after.find("reason=\"tls\""), std::string::npos) << after;
  EXPECT_NE(after.find("reason=\"authentication\""), std::string::npos)
      << after;
  EXPECT_EQ(before.find("reason=\"tls\""), std::string::npos);
}

}  // namespace
}  // namespace kvcanary::testing
