#pragma once
// web/'s step-through player (player.html, player.js, player.css), embedded at build time by
// serve/embed_player.cmake: `seqtape serve` serves it under /player/ to show a request's trace.
//
// Dimension key: none.

#include <string>
#include <vector>

namespace seqtape::serve {

struct PlayerAsset {
  const char* name;  // "player.html", ...
  const char* content_type;
  const char* text;
};

const std::vector<PlayerAsset>& player_assets();

}  // namespace seqtape::serve
