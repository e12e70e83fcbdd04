// The table of decoding options (infer/options.h) drives both generate's flags and the server's
// request fields: every row is accepted by both, its check rejects a bad value with the same
// message in both (in each side's names), and its "needs sample" rule is the same in both.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "infer/model.h"
#include "infer/options.h"
#include "serve/openai.h"
#include "serve/request.h"
#include "serve_util.h"

namespace seqtape {
namespace {

using nlohmann::json;

const InferenceModel& f15() {
  static const InferenceModel m = InferenceModel::load(serve_test::f15_path());
  return m;
}

struct Ran {
  int status = -1;
  std::string output;  // stdout and stderr
};

// `seqtape generate` on f15 with `args` (each shell-quoted here).
Ran generate(const std::vector<std::string>& args) {
  std::string cmd = std::string(SEQTAPE_CLI_PATH) + " generate --json --model '" +
                    serve_test::f15_path() + "' --input 我爱";
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " 2>&1 </dev/null";
  Ran r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// The request's error (field, message), or ("", "") when it is accepted.
std::pair<std::string, std::string> request_error(json body) {
  body["input"] = "我爱";
  try {
    serve::parse_generate_request(body.dump(), f15(), serve::Limits{});
  } catch (const serve::RequestError& e) {
    return {e.field, e.what()};
  }
  return {"", ""};
}

bool is_bool(const DecodingOption& d) {
  return std::holds_alternative<bool GenerateOptions::*>(d.member);
}

// A value the row takes, as JSON: the default; a flag given; a token or text.
json good_value(const DecodingOption& d) {
  if (is_bool(d)) return true;
  if (std::holds_alternative<std::vector<int32_t> GenerateOptions::*>(d.member))
    return json::array({"<eos>"});
  if (std::holds_alternative<std::vector<std::string> GenerateOptions::*>(d.member))
    return json::array({"z"});
  return option_value(d, GenerateOptions{});
}

// The flag and its value on the command line for a JSON value of the row.
std::vector<std::string> flag_args(const DecodingOption& d, const json& v) {
  if (is_bool(d)) return {std::string(d.flag)};
  const json& one = v.is_array() ? v.at(0) : v;
  // A text as the next argument (it may be empty); a number after '=' (it may be negative).
  if (one.is_string()) return {std::string(d.flag), one.get<std::string>()};
  return {std::string(d.flag) + "=" + one.dump()};
}

// A value the row's own check refuses (defaults elsewhere, sampling if the row needs it), and
// the problem it gives; nothing when neither 0, -1 nor "" is refused.
std::optional<std::pair<json, GenerateOptions>> bad_value(const DecodingOption& d) {
  std::vector<json> candidates = {0, -1};
  if (std::holds_alternative<std::vector<std::string> GenerateOptions::*>(d.member))
    candidates = {json::array({""})};
  for (const json& v : candidates) {
    GenerateOptions o;
    o.sample = d.needs_sample;
    const bool set = std::visit(
        [&](auto m) {
          using T = std::remove_cvref_t<decltype(o.*m)>;
          if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double> ||
                        std::is_same_v<T, std::vector<std::string>>) {
            o.*m = v.get<T>();
            return true;
          }
          return false;
        },
        d.member);
    if (set && d.check && d.check(o, option_json)) return std::pair{v, o};
  }
  return std::nullopt;
}

TEST(DecodingOptions, EveryRowIsAFlagAndARequestFieldWithTheSameChecks) {
  int checked = 0, needing = 0;
  for (const DecodingOption& d : decoding_options()) {
    SCOPED_TRACE(std::string(d.field));
    const std::string field(d.json);
    json sample = d.needs_sample ? json{{"sample", true}} : json::object();
    std::vector<std::string> sample_flag;
    if (d.needs_sample) sample_flag.push_back(std::string(option_flag("sample")));

    // Accepted by both.
    json body = sample;
    body[field] = good_value(d);
    EXPECT_EQ(request_error(body).second, "") << body.dump();
    std::vector<std::string> args = sample_flag;
    for (const std::string& a : flag_args(d, good_value(d))) args.push_back(a);
    const Ran ok = generate(args);
    EXPECT_EQ(ok.status, 0) << ok.output;

    // A value of the wrong type is refused by the request parser, naming the field.
    body[field] = is_bool(d) ? json("x") : json(true);
    EXPECT_EQ(request_error(body).first, field) << body.dump();

    // The row's check: the same problem in both, each in its own names.
    if (const auto bad = bad_value(d)) {
      ++checked;
      const auto& [v, o] = *bad;
      body = sample;
      body[field] = v;
      const std::string as_field = *o.problem(option_json), as_flag = *o.problem(option_flag);
      EXPECT_EQ(request_error(body), std::pair(field, as_field)) << body.dump();
      args = sample_flag;
      for (const std::string& a : flag_args(d, v)) args.push_back(a);
      const Ran refused = generate(args);
      EXPECT_EQ(refused.status, 2) << refused.output;
      EXPECT_EQ(refused.output, "seqtape: usage error: " + as_flag + "\n");
    }

    // The "needs sample" rule: given without sampling, refused alike.
    if (d.needs_sample) {
      ++needing;
      const GenerateOptions o;
      const auto given = [&d](const DecodingOption& g) { return &g == &d; };
      body = {{field, good_value(d)}};
      EXPECT_EQ(request_error(body), std::pair(field, *given_problem(o, given, option_json)));
      const Ran refused = generate(flag_args(d, good_value(d)));
      EXPECT_EQ(refused.status, 2);
      EXPECT_EQ(refused.output,
                "seqtape: usage error: " + *given_problem(o, given, option_flag) + "\n");
    }
  }
  // The table holds range checks and sampling options for the loops above to try.
  EXPECT_GE(checked, 10);
  EXPECT_EQ(needing, 4);
}

// A /v1/completions "stream" that is not a boolean is the request's error, named, with n > 1
// or without (fuzz_request found a number there throwing nlohmann's type_error).
TEST(DecodingOptions, CompletionsStreamThatIsNotABooleanIsTheRequestsError) {
  for (const json& stream : {json(1.9), json(1), json("yes"), json::array()})
    for (int n : {1, 2}) {
      const json body = {{"model", "m"}, {"prompt", {"我爱", "学习"}},
                         {"n", n},       {"temperature", 0.8},
                         {"seed", 3},    {"stream", stream}};
      std::string field = "(no error)";
      try {
        serve::parse_completion_request(body.dump(), f15(), serve::Limits{}, "m");
      } catch (const serve::RequestError& e) {
        field = e.field;
      }
      EXPECT_EQ(field, "stream") << stream.dump() << ", n " << n;
    }
}

// /v1/completions' "seqtape" object takes every row OpenAI has no name for (and the deadline,
// as docs/serving.md says), and names each field's error there.
TEST(DecodingOptions, CompletionsExtensionTakesTheRowsOpenAiHasNoNameFor) {
  const auto completion_error = [](const json& ext) -> std::string {
    const json body = {{"model", "m"}, {"prompt", "我爱"}, {"temperature", 0}, {"seqtape", ext}};
    try {
      serve::parse_completion_request(body.dump(), f15(), serve::Limits{}, "m");
    } catch (const serve::RequestError& e) {
      return e.field;
    }
    return "";
  };
  int extension = 0;
  for (const DecodingOption& d : decoding_options()) {
    if (!d.openai.empty() || d.needs_sample) continue;
    ++extension;
    const std::string field(d.json);
    EXPECT_EQ(completion_error({{field, good_value(d)}}), "") << field;
    EXPECT_EQ(completion_error({{field, is_bool(d) ? json("x") : json(true)}}), "seqtape." + field);
  }
  EXPECT_GE(extension, 8);
  EXPECT_EQ(completion_error({{"timeout_ms", 5000}}), "");
  EXPECT_EQ(completion_error({{"timeout_ms", -5}}), "seqtape.timeout_ms");
}

// The request fields are the table's, between the input and the deadline fields.
TEST(DecodingOptions, RequestFieldsAndModelDescriptionComeFromTheTable) {
  const std::vector<std::string>& fields = serve::request_fields();
  const json described = serve::request_options();
  ASSERT_EQ(described.size(), decoding_options().size());
  for (size_t i = 0; i < decoding_options().size(); ++i) {
    const DecodingOption& d = decoding_options()[i];
    EXPECT_EQ(fields.at(3 + i), d.json);
    EXPECT_EQ(described[i]["name"], d.json);
    EXPECT_EQ(described[i]["default"], option_value(d, GenerateOptions{}));
    EXPECT_EQ(described[i].contains("needs"), d.needs_sample);
  }
}

}  // namespace
}  // namespace seqtape
