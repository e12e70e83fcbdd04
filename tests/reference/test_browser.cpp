// The step-through page (web/player.html) in headless Chromium, and the walkthrough command.
// Both run programs outside this test binary: the browser test is web/test/player_test.mjs
// (Node + Debian's chromium and chromium-driver), the walkthrough is the built `seqtape`.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

namespace fs = std::filesystem;

// This binary is <build>/tests/test_reference: the build root is two levels up.
fs::path build_root() {
  return fs::canonical("/proc/self/exe").parent_path().parent_path();
}

struct Output {
  int code = -1;
  std::string out;
};

Output run(const std::string& cmd) {
  Output r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string quote(const fs::path& p) {
  return "'" + p.string() + "'";
}

TEST(WebPlayer, F15TraceStepsToTheEndInHeadlessChromium) {
  const char* chromium_env = std::getenv("SEQTAPE_CHROMIUM");
  const fs::path chromium = chromium_env ? chromium_env : "/usr/bin/chromium";
  if (!fs::exists(chromium))
    GTEST_SKIP() << chromium << " is not installed (scripts/setup.sh installs Debian's chromium)";
  ASSERT_EQ(run("node --version").code, 0) << "node is needed to drive the browser (Debian nodejs)";
  const char* art_env = std::getenv("SEQTAPE_ARTIFACTS");
  const fs::path artifacts = art_env ? fs::path(art_env) : build_root() / "artifacts";
  fs::create_directories(artifacts);
  const fs::path shot = artifacts / "player.png";
  fs::remove(shot);
  const fs::path script = fs::path(SEQTAPE_SOURCE_DIR) / "web" / "test" / "player_test.mjs";
  Output r = run("node " + quote(script) + " --screenshot " + quote(shot));
  if (r.code == 77) GTEST_SKIP() << r.out;
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(shot)) << "no screenshot at " << shot;
  std::printf("%s", r.out.c_str());
}

TEST(Walkthrough, PrintsBothDocumentsWithTheF15Rounds) {
  const fs::path exe = build_root() / "cli" / "seqtape";
  if (!fs::exists(exe)) GTEST_SKIP() << "build the seqtape binary first (" << exe << ")";
  Output r = run(quote(exe) + " walkthrough");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* want :
       {"[3,4,4,5,6,7,2]", "[1,3,4,4,5,6,7]", "2.0326", "1.8629", "every entry within 0.01",
        "selections [3,5,6], cache lengths [2,3,4]", "argmax = 3", "prefill", "decode"})
    EXPECT_NE(r.out.find(want), std::string::npos) << "missing '" << want << "' in\n" << r.out;
  Output help = run(quote(exe) + " walkthrough --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--write-f15"), std::string::npos) << help.out;
}

}  // namespace
