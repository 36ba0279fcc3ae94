#!/usr/bin/env bash
# Draws the bench report from a sample results file, renders each chart and a blank SVG of the
# same size in headless Chromium, and checks the charts are not blank: a chart's PNG must be much
# larger than the blank one's (a blank page compresses to almost nothing).
set -euo pipefail
nibble="$1"; sample="$2"; out="$3"
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
  echo "chromium is not installed (scripts/install-deps installs it)" >&2
  exit 1
fi
rm -rf "$out"; mkdir -p "$out"
"$nibble" bench --report "$out/report" --from "$sample" >/dev/null
printf '<svg xmlns="http://www.w3.org/2000/svg" width="760" height="480"><rect width="100%%" height="100%%" fill="white"/></svg>\n' >"$out/blank.svg"
render() {
  "$chromium" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$out/profile" --hide-scrollbars --window-size=760,480 \
    --screenshot="$2" "file://$1" >/dev/null 2>&1
  [ -s "$2" ] || { echo "chromium produced no PNG for $1" >&2; exit 1; }
}
render "$out/blank.svg" "$out/blank.png"
blank=$(stat -c %s "$out/blank.png")
for chart in roofline speedup; do
  render "$out/report/$chart.svg" "$out/$chart.png"
  size=$(stat -c %s "$out/$chart.png")
  echo "$chart.png: $size bytes (blank page: $blank bytes)"
  if [ "$size" -lt $((blank * 4)) ]; then
    echo "$chart.svg renders blank" >&2
    exit 1
  fi
done
