#!/usr/bin/env bash
# bench/baseline-plugin: the copy loads and registers under the new name with the plugin's kernels,
# and bad arguments are refused with a message that names what was expected.
# usage: baseline_plugin_test.sh SCRIPT NIBBLE_CLI PLUGIN.so WORK_DIR
set -euo pipefail
script=$1 cli=$2 plugin=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$script" "$plugin" cand "$work/ab" >/dev/null
[[ -f $work/ab/libnibble_cand.so ]] || fail "no libnibble_cand.so written"
"$cli" backends --plugin-dir "$work/ab" --json >"$work/backends.json"
/usr/bin/python3 - "$work/backends.json" "$plugin" <<'PY' || fail "the copy did not register as cand"
import json, os, sys
d = json.load(open(sys.argv[1]))
own = os.path.basename(sys.argv[2])[len("libnibble_"):-len(".so")]
by_name = {b["name"]: b for b in d["backends"]}
cand, orig = by_name.get("cand"), by_name.get(own)
assert cand is not None and cand["available"], by_name.keys()
assert cand["file"].endswith("/libnibble_cand.so"), cand["file"]
assert orig is not None, "the original plugin is still found in the default folder"
assert [k["name"] for k in cand["kernels"]] == [k["name"] for k in orig["kernels"]]
PY

expect_refusal() {  # words, then the arguments
  local words=$1; shift
  local msg
  if msg=$("$script" "$@" 2>&1); then fail "accepted: $*"; fi
  [[ $msg == *"$words"* ]] || fail "for '$*' expected '$words' in: $msg"
}
expect_refusal "usage:" "$plugin" cand
expect_refusal "no such file" "$work/missing.so" cand "$work/x"
cp "$plugin" "$work/plugin.so"
expect_refusal "libnibble_NAME.so" "$work/plugin.so" cand "$work/x"
expect_refusal "at most" "$plugin" a_name_longer_than_the_plugins "$work/x"
expect_refusal "lower-case" "$plugin" "Ca/nd" "$work/x"
own=$(basename "$plugin" .so); own=${own#libnibble_}
expect_refusal "must differ" "$plugin" "$own" "$work/x"
echo "baseline-plugin: all checks passed"
