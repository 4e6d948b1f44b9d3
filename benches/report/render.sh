#!/usr/bin/env bash
# `wai report` on a large run: ROWS rows from `wai gen` (our shape) and, with SHAPE=reference,
# rows in the reference's shape (`wai gen --shape reference`). Prints the page's size, the time
# and peak RSS of `wai report`, and how long headless Chromium takes to load and draw the page
# (Playwright's `load` event, then the first frame; best of 3 loads).
#
#   benches/report/render.sh [ROWS]          # default 1,000,000
#
# Needs a wai binary (BIN, default target/release: cargo build --release --bin wai), Debian's
# chromium and a python with Playwright's client: WAI_CHROMIUM and WAI_BROWSER_PYTHON, as .ci/run
# sets them. The page's size and Chromium's time do not depend on how wai was built.
set -euo pipefail
rows=${1:-1000000}
bin=${BIN:-target/release}
shape=${SHAPE:-wai}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
gen_shape=()
[ "$shape" = reference ] && gen_shape=(--shape reference)
"$bin/wai" gen --rows "$rows" --seed 1 "${gen_shape[@]}" --out "$dir/rows.parquet" >/dev/null
/usr/bin/time -f '{"report_wall_s": %e, "report_peak_rss_mb": %M}' -o "$dir/time" \
    "$bin/wai" report "$dir/rows.parquet" --out "$dir/page.html" >/dev/null
python3 - "$dir/time" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["report_peak_rss_mb"] = round(t["report_peak_rss_mb"] / 1024)
print(json.dumps(t))
PY
echo "{\"rows\": $rows, \"shape\": \"$shape\", \"page_bytes\": $(stat -c %s "$dir/page.html")}"
"$WAI_BROWSER_PYTHON" - "$dir/page.html" "$WAI_CHROMIUM" <<'PY'
import json, sys, time
from playwright.sync_api import sync_playwright
page_path, chromium = sys.argv[1:3]
best = None
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
    for _ in range(3):
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        started = time.monotonic()
        page.goto("file://" + page_path, wait_until="load")
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")
        took = time.monotonic() - started
        best = took if best is None else min(best, took)
        listed = page.locator("#t-list a").count()
        page.close()
    browser.close()
print(json.dumps({"render_s_best_of_3": round(best, 3), "listed": listed, "page_errors": errors}))
PY
