// libFuzzer target over the command line itself: argument vectors for `seqtape train --steps 1`,
// `generate` and `gen-copy`, run in-process through cli::run_cli on tiny files.
//
// Input: lines separated by '\n'. The first line picks the command (train, generate,
// gen-copy); the others are extra arguments after the fixed ones below. Paths the fuzzer writes
// must stay inside the run directory: an argument that is absolute or holds ".." is skipped
// (the input is not run). Every run must
//   - return an exit code in {0, 2, 3} (never 4: a bug; never a crash or sanitizer report),
//   - write nothing outside the run directory (the sandbox around it must stay as it was).
// The memory budget is cut to 4 MB (set_memory_limit_for_testing), so a hostile size is
// refused by the budget check, as it would be on a small machine, and each input stays fast.
// (At 64 MB, `generate --beam 100000` on the 4-wide test model was accepted and ran past the
// fuzz timeout under the sanitizers and coverage; decoding work grows with the KV cache the
// budget bounds, and 4 MB keeps the largest beam to a few seconds. The fixed
// commands' defaults need under 2 MB.)
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "model/memory_budget.h"

namespace fs = std::filesystem;

namespace {

fs::path g_sandbox, g_run;
std::set<std::string> g_fixtures;  // entries of the run directory that stay between inputs

void put(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

std::vector<std::string> base_args(const std::string& command) {
  if (command == "train")
    return {"train",   "--data", "data/train.tsv", "--out", "out",
            "--steps", "1",      "--eval-max",     "1",     "--no-progress"};
  if (command == "generate") return {"generate", "--model", "model/checkpoint.bin"};
  if (command == "gen-copy") return {"gen-copy", "--out", "gc"};
  return {};
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char tmpl[] = "/tmp/seqtape_fuzz_cli.XXXXXX";
  if (!::mkdtemp(tmpl)) std::abort();
  g_sandbox = tmpl;
  g_run = g_sandbox / "run";
  put(g_run / "data/train.tsv", "今天\t今天\n好\t好\n天\t天\n今\t今\n");
  put(g_run / "data/valid.tsv", "天今\t天今\n");
  put(g_run / "data/vocab.txt", "<pad>\n<bos>\n<eos>\n<unk>\n<sep>\n今\n天\n好\n");
  put(g_run / "data/config.json", R"({"d_model": 4, "n_heads": 1, "d_ff": 8})");
  std::ifstream ck(fs::path(SEQTAPE_SOURCE_DIR) / "fuzz/corpus/checkpoint/tiny_model.ckpt",
                   std::ios::binary);
  if (!ck) std::abort();
  put(g_run / "model/checkpoint.bin", std::string(std::istreambuf_iterator<char>(ck), {}));
  fs::current_path(g_run);
  g_fixtures = entries(g_run);
  const int null_in = ::open("/dev/null", O_RDONLY);
  ::dup2(null_in, 0);  // generate without --input reads stdin: give it nothing, never a tty
  ::close(null_in);
  seqtape::set_memory_limit_for_testing(4 << 20);
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(g_sandbox, ec);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> lines(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n')
      lines.emplace_back();
    else
      lines.back() += static_cast<char>(data[i]);
  }
  std::vector<std::string> args = base_args(lines[0]);
  if (args.empty()) return 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string& a = lines[i];
    if (a.starts_with("/") || a.find("..") != std::string::npos) return 0;  // outside the run
    if (a.find('\0') != std::string::npos) return 0;  // cannot be a C argument
    args.push_back(a);
  }
  std::vector<std::string> argv_s = {"seqtape"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  const int code = seqtape::cli::run_cli(static_cast<int>(argv_s.size()), argv.data());
  std::fflush(stdout);
  if (code != 0 && code != 2 && code != 3) {
    std::fprintf(stderr, "fuzz_cli: exit code %d (allowed: 0, 2, 3)\n", code);
    std::abort();
  }
  if (fs::current_path() != g_run) {
    std::fprintf(stderr, "fuzz_cli: the command changed the working directory\n");
    std::abort();
  }
  if (entries(g_sandbox) != std::set<std::string>{"run"}) {
    std::fprintf(stderr, "fuzz_cli: something was written outside the run directory\n");
    std::abort();
  }
  // Forget what this input wrote inside the run directory.
  for (const std::string& e : entries(g_run))
    if (!g_fixtures.count(e)) fs::remove_all(g_run / e);
  return 0;
}
