#pragma once
// API keys of `seqtape serve --api-key-file`: reading the file, and comparing a request's key
// with every key in time that does not depend on where they differ.
//
// Dimension key: none.

#include <string>
#include <string_view>
#include <vector>

namespace seqtape::serve {

// One key per line; blank lines and lines starting with # are skipped, and spaces around a key
// are dropped. Error naming the file (and line) when it cannot be read, holds no key, or a key
// has a space or a control character inside (it could not be sent in a header).
std::vector<std::string> read_api_keys(const std::string& path);

// Whether `given` equals one of `keys`. Every byte of every key is compared, with no early
// exit, so the time taken tells nothing of how much of a key was right.
bool key_matches(const std::vector<std::string>& keys, std::string_view given);

// The key of an "Authorization: Bearer <key>" header value; "" for any other value.
std::string_view bearer_token(std::string_view authorization);

}  // namespace seqtape::serve
