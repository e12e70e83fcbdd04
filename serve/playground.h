#pragma once
// The playground page served at `/`: type a source, pick decoding options, watch the streamed
// output (POST /v1/generate with "stream": true, read as Server-Sent Events).
#include <string>

namespace seqtape::serve {

const std::string& playground_html();

}  // namespace seqtape::serve
