#pragma once

#include <cstddef>
#include <string_view>

namespace fabricscope::exporters {

// The live page's files (exporters/exposition/page/), compiled into the binary at build time by
// page/embed.cmake: no CDN, nothing fetched from elsewhere, so that the page works on an
// air-gapped cluster. Served by HttpServer at `path` with `content_type`.
struct PageAsset {
  const char* path;          // "/", "/page.js", "/page.css"
  const char* content_type;  // with charset for text
  std::string_view body;
};
extern const PageAsset kPageAssets[];
extern const size_t kPageAssetCount;

}  // namespace fabricscope::exporters
