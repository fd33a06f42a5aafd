// The bundle view: one self-contained page, escaped, rendered by headless
// Chromium when it is installed.
#include "auditor/evidence/bundle_html.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/auditor/campaign/campaign_records.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

std::vector<Control> RepoControls() {
  auto controls =
      LoadControls(std::string(KVCANARY_SOURCE_DIR) + "/docs/controls.json");
  EXPECT_TRUE(controls.ok()) << controls.status();
  return controls.ok() ? *controls : std::vector<Control>{};
}

std::string BothPage() {
  return BundleHtml({records::FindingsCampaign(), records::CleanCampaign()},
                    RepoControls(), records::Context());
}

TEST(BundleHtmlTest, ShowsAnswersCampaignsIncidentsAndCheckpoint) {
  const std::string html = BothPage();
  EXPECT_NE(html.find("Tenant isolation: No, findings open"),
            std::string::npos);
  EXPECT_NE(html.find("<a href=\"answers/ccm-ivs-06.md\">"), std::string::npos);
  EXPECT_NE(html.find("<a href=\"campaigns/c20260502-b.json\">"),
            std::string::npos);
  EXPECT_NE(html.find("i-0badc0de"), std::string::npos);
  EXPECT_NE(html.find("I&amp;S-06"), std::string::npos);
  EXPECT_NE(html.find(std::string(64, 'a')), std::string::npos);
  // No scripts, no external assets.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://127.0.0.1:8080"));

  const std::string clean = BundleHtml({records::CleanCampaign()},
                                       RepoControls(), records::Context());
  EXPECT_NE(clean.find("Tenant isolation: Yes, tested"), std::string::npos);
  EXPECT_NE(clean.find("<td colspan=\"7\">None.</td>"), std::string::npos);
}

TEST(BundleHtmlTest, EscapesEveryStringFromTheRecords) {
  json c = records::FindingsCampaign();
  c["target"] = "<script>alert(1)</script>";
  c["file"] = "x\"onmouseover=\"y";
  c["incidents"][0]["kind"] = "<b>";
  const std::string html = BundleHtml({c}, RepoControls(), records::Context());
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  EXPECT_EQ(html.find("<b>"), std::string::npos);
  EXPECT_EQ(html.find("x\"onmouseover"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;"), std::string::npos);
}

int Shell(const std::string& cmd, std::string* out = nullptr) {
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) {
    if (out != nullptr) out->append(buf, n);
  }
  const int rc = pclose(p);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(BundleHtmlTest, RendersInHeadlessChromium) {
  std::string chromium;
  for (const char* b : {"chromium", "chromium-browser"}) {
    if (Shell(std::string("command -v ") + b + " >/dev/null") == 0) {
      chromium = b;
      break;
    }
  }
  if (chromium.empty()) {
    GTEST_SKIP() << "chromium not installed (apt-get install chromium "
                    "fonts-dejavu-core); bundle page not rendered";
  }
  const std::string base =
      ::testing::TempDir() + "kvcanary_bundle_html_" + std::to_string(getpid());
  std::ofstream(base + ".html", std::ios::binary) << BothPage();
  // Chromium's profile, under the test's TMPDIR (removed with it).
  const std::string profile = ::testing::TempDir() + "chromium-profile";
  ASSERT_EQ(mkdir(profile.c_str(), 0700), 0);
  const std::string flags =
      std::string(
          " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
          " --disable-background-networking --disable-component-update"
          " --disable-sync --hide-scrollbars --user-data-dir=") +
      profile;
  ASSERT_EQ(Shell("timeout 60 " + chromium + flags +
                  " --window-size=1200,900 --screenshot=" + base + ".png" +
                  " file://" + base + ".html >/dev/null"),
            0);
  std::string dom;
  ASSERT_EQ(Shell("timeout 60 " + chromium + flags + " --dump-dom file://" +
                      base + ".html",
                  &dom),
            0);
  Shell(std::string("rm -rf ") + profile);
  std::ifstream png(base + ".png", std::ios::binary);
  std::stringstream ss;
  ss << png.rdbuf();
  EXPECT_EQ(ss.str().compare(0, 8, "\x89PNG\r\n\x1a\n"), 0);
  EXPECT_GT(ss.str().size(), 10000u);
  EXPECT_NE(dom.find("Tenant isolation: No, findings open"), std::string::npos);
  EXPECT_NE(dom.find("i-0badc0de"), std::string::npos);
  std::cout << "chromium: bundle page rendered to " << base << ".png\n";
}

}  // namespace
}  // namespace kvcanary::auditor
