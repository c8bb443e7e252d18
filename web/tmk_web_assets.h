/* tmk_web_assets.h — the dashboard's files (HTML, JS, CSS, uPlot) embedded into telemark-relay at
 * build time by web/embed.cmake, looked up by URL path ("/index.html", "/js/main.js"). */
#ifndef TMK_WEB_ASSETS_H
#define TMK_WEB_ASSETS_H
#include <stddef.h>

typedef struct tmk_web_asset {
  const char* path;          /* URL path, starting with "/" */
  const char* content_type;  /* for the Content-Type header */
  const unsigned char* data; /* the file's bytes (NUL-terminated for convenience) */
  size_t size;               /* bytes, without the terminating NUL */
} tmk_web_asset;

/* The asset at `path`, or NULL. */
const tmk_web_asset* tmk_web_asset_find(const char* path);
/* How many assets are embedded, and the i-th one (NULL past the end). */
size_t tmk_web_asset_count(void);
const tmk_web_asset* tmk_web_asset_at(size_t i);
#endif
