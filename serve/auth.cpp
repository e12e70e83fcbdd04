// read_api_keys(), key_matches(), bearer_token().
//
// Dimension key: none.
#include "serve/auth.h"

#include <cctype>
#include <cstdint>
#include <fstream>

#include "tensor/tensor.h"  // fail

namespace seqtape::serve {

std::vector<std::string> read_api_keys(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("serve", "cannot read the API key file " + path);
  std::vector<std::string> keys;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const std::string key = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    for (const char c : key)
      if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f)
        fail("serve", path + ":" + std::to_string(number) +
                          ": an API key has a space or a control character inside");
    keys.push_back(key);
  }
  if (in.bad()) fail("serve", "cannot read the API key file " + path);
  if (keys.empty())
    fail("serve", "the API key file " + path +
                      " holds no key (one per line; blank lines and # comments are skipped)");
  return keys;
}

bool key_matches(const std::vector<std::string>& keys, std::string_view given) {
  unsigned found = 0;
  for (const std::string& key : keys) {
    unsigned diff = key.size() == given.size() ? 0u : 1u;
    for (size_t i = 0; i < key.size(); ++i) {
      const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
      diff |= static_cast<unsigned char>(key[i]) ^ g;
    }
    found |= static_cast<unsigned>(diff == 0);
  }
  return found != 0;
}

std::string_view bearer_token(std::string_view authorization) {
  // The scheme's name is case-insensitive (RFC 9110, 11.1).
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size()) return {};
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return {};
  return authorization.substr(kScheme.size());
}

}  // namespace seqtape::serve
