#include "train/copy_task.h"

#include <algorithm>
#include <filesystem>
#include <unordered_set>

#include "tensor/rng.h"
#include "text/tokenizer.h"

namespace seqtape {

std::vector<std::string> default_copy_alphabet() {
  return {"今", "天", "气", "很", "好", "的", "是", "我", "你", "他", "她", "们", "来", "去",
          "上", "下", "大", "小", "中", "国", "人", "学", "生", "日", "月", "水", "火", "山",
          "木", "不", "有", "在", "这", "那", "个", "也", "和", "说", "要", "会"};
}

namespace {

// Number of strings with lengths in [min_len, max_len] over `a` symbols, saturated at `cap`
// so huge spaces do not overflow.
uint64_t count_strings(uint64_t a, int64_t min_len, int64_t max_len, uint64_t cap) {
  uint64_t total = 0, power = 1;
  for (int64_t len = 1; len <= max_len; ++len) {
    power = (a != 0 && power > cap / a) ? cap : power * a;
    if (len >= min_len) total = (total > cap - power) ? cap : total + power;
  }
  return total;
}

// Checks the options; returns how many distinct strings they allow (capped at 2^63).
uint64_t checked_string_space(const CopyTaskOptions& opt) {
  const char* where = "generate_copy_task";
  if (opt.n_train < 0 || opt.n_valid < 0)
    fail(where, "n_train and n_valid must be >= 0 (got " + std::to_string(opt.n_train) + ", " +
                    std::to_string(opt.n_valid) + ")");
  if (opt.min_len < 1 || opt.max_len < opt.min_len)
    fail(where, "need 1 <= min_len <= max_len (got " + std::to_string(opt.min_len) + ", " +
                    std::to_string(opt.max_len) + ")");
  if (opt.max_len > kMaxPositions)
    fail(where, "max_len must be at most " + std::to_string(kMaxPositions) +
                    " (no model takes longer sequences), got " + std::to_string(opt.max_len));
  if (opt.alphabet.empty()) fail(where, "empty alphabet");
  std::unordered_set<std::string> letters;
  for (const std::string& c : opt.alphabet) {
    const std::vector<char32_t> cps = utf8_decode(c, "copy alphabet entry '" + c + "'");
    if (cps.size() != 1) fail(where, "alphabet entry '" + c + "' is not exactly one character");
    if (c == "\t" || c == "\n" || c == "\r")
      fail(where, "alphabet entry " + code_point_label(cps[0]) + " cannot appear in a TSV field");
    if (!letters.insert(c).second) fail(where, "alphabet entry '" + c + "' appears twice");
  }

  const uint64_t cap = UINT64_MAX / 2;
  const uint64_t space = count_strings(opt.alphabet.size(), opt.min_len, opt.max_len, cap);
  const auto n_valid = static_cast<uint64_t>(opt.n_valid);
  if (n_valid > space || (n_valid == space && opt.n_train > 0))
    fail(where, "only " + std::to_string(space) + " distinct strings of length " +
                    std::to_string(opt.min_len) + ".." + std::to_string(opt.max_len) + " over " +
                    std::to_string(opt.alphabet.size()) + " characters: cannot hold " +
                    std::to_string(opt.n_valid) +
                    " distinct validation strings and still leave training strings");
  return space;
}

}  // namespace

MemoryNeed copy_task_memory(const CopyTaskOptions& opt) {
  size_t widest = 1;  // bytes of the longest alphabet entry
  for (const std::string& c : opt.alphabet) widest = std::max(widest, c.size());
  // In double: the lengths are not checked yet, and their int64 sum can overflow.
  const double mean_len = 0.5 * (static_cast<double>(std::max<int64_t>(opt.min_len, 0)) +
                                 static_cast<double>(std::max<int64_t>(opt.max_len, 0)));
  // Per pair: the TextPair and its two strings (a heap block each, once past 15 bytes).
  const double per_pair =
      static_cast<double>(sizeof(TextPair)) + 2.0 * (mean_len * static_cast<double>(widest) + 16.0);
  const double pairs = static_cast<double>(std::max<int64_t>(opt.n_train, 0)) +
                       static_cast<double>(std::max<int64_t>(opt.n_valid, 0));
  const double bytes = pairs * per_pair;
  return {bytes >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(bytes),
          std::to_string(opt.n_train) + " training and " + std::to_string(opt.n_valid) +
              " held-out strings of up to " + std::to_string(opt.max_len) + " characters"};
}

CopyTask generate_copy_task(const CopyTaskOptions& opt) {
  const char* where = "generate_copy_task";
  const uint64_t space = checked_string_space(opt);
  const auto n_valid = static_cast<uint64_t>(opt.n_valid);
  Rng rng(opt.seed);
  const auto span_len = static_cast<uint64_t>(opt.max_len - opt.min_len + 1);
  auto draw = [&] {
    const auto len = opt.min_len + static_cast<int64_t>(uniform_below(rng, span_len));
    std::string s;
    for (int64_t i = 0; i < len; ++i) s += opt.alphabet[uniform_below(rng, opt.alphabet.size())];
    return s;
  };
  // Rejection is fast unless the requested strings nearly exhaust the space; the bound turns a
  // pathological request into an Error instead of a hang.
  const uint64_t max_attempts = 1000 * (n_valid + static_cast<uint64_t>(opt.n_train)) + 1000000;
  uint64_t attempts = 0;
  auto give_up = [&](const char* what) {
    if (++attempts > max_attempts)
      fail(where, std::string("gave up drawing ") + what + " strings after " +
                      std::to_string(max_attempts) + " attempts; the string space (" +
                      std::to_string(space) + ") is too small for the request");
  };

  CopyTask task;
  std::unordered_set<std::string> valid_set;
  while (task.valid.size() < n_valid) {
    give_up("validation");
    std::string s = draw();
    if (!valid_set.insert(s).second) continue;
    const auto line = static_cast<int64_t>(task.valid.size()) + 1;
    task.valid.push_back({s, s, line});
  }
  while (static_cast<int64_t>(task.train.size()) < opt.n_train) {
    give_up("training");
    std::string s = draw();
    if (valid_set.contains(s)) continue;
    const auto line = static_cast<int64_t>(task.train.size()) + 1;
    task.train.push_back({s, s, line});
  }
  return task;
}

void write_copy_task(const std::string& dir, const CopyTask& task,
                     const std::vector<std::string>& alphabet) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(dir, "cannot create directory: " + ec.message());
  const std::filesystem::path d(dir);
  write_tsv((d / "train.tsv").string(), task.train);
  write_tsv((d / "valid.tsv").string(), task.valid);
  Vocab::build(alphabet).save((d / "vocab.txt").string());
}

}  // namespace seqtape
