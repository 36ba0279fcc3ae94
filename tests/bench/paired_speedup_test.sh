#!/usr/bin/env bash
# bench/paired-speedup: each case's speed-up is the geometric mean of the two orders, the summary
# is the geometric mean over the cases both runs have, and bad input is refused with a message
# that names the file and what was expected.
# usage: paired_speedup_test.sh SCRIPT WORK_DIR
set -euo pipefail
script=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

# New build timed first: 1.21 on 2048², 0.81 on 4096²; timed second, the old build read 1/1.0 and
# 1/0.64 of it, so the pairs are √(1.21·1.0) = 1.1 and √(0.81·0.64) = 0.72. A case only in one run
# is left out and said so.
cat >"$work/new.json" <<'EOF'
{"cases": [
 {"K": 2048, "N": 2048, "M": 1, "mode": "w4a16", "threads": 16, "speedup_baseline": {"median": 1.21}},
 {"K": 4096, "N": 4096, "M": 1, "mode": "w4a16", "threads": 16, "speedup_baseline": {"median": 0.81}},
 {"K": 4096, "N": 4096, "M": 16, "mode": "w4a8", "threads": 16, "speedup_baseline": {"median": 2.0}}
]}
EOF
cat >"$work/old.json" <<'EOF'
{"cases": [
 {"K": 2048, "N": 2048, "M": 1, "mode": "w4a16", "threads": 16, "speedup_baseline": {"median": 1.0}},
 {"K": 4096, "N": 4096, "M": 1, "mode": "w4a16", "threads": 16, "speedup_baseline": {"median": 1.5625}}
]}
EOF
out=$("$script" "$work/new.json" "$work/old.json" 2>"$work/err")
grep -q "2048x2048 M=1 w4a16 t16 .* 1.210 .* 1.000 .* 1.100" <<<"$out" || fail "2048² pair: $out"
grep -q "4096x4096 M=1 w4a16 t16 .* 0.810 .* 0.640 .* 0.720" <<<"$out" || fail "4096² pair: $out"
# √(1.1 · 0.72) = 0.8899
grep -q "geometric mean 0.890 over 2 cases (0.720-1.100)" <<<"$out" || fail "summary: $out"
grep -q "1 case(s) only in $work/new.json" "$work/err" || fail "the unpaired case was not named"

expect_refusal() {  # words, then the arguments
  local words=$1; shift
  local msg
  if msg=$("$script" "$@" 2>&1); then fail "accepted: $*"; fi
  [[ $msg == *"$words"* ]] || fail "for '$*' expected '$words' in: $msg"
}
expect_refusal "$work/none.json: cannot read" "$work/none.json" "$work/old.json"
printf '{"cases": [' >"$work/cut.json"
expect_refusal "$work/cut.json: not JSON" "$work/new.json" "$work/cut.json"
echo '{"runs": []}' >"$work/other.json"
expect_refusal "expected a \`nibble bench --json\` file" "$work/other.json" "$work/old.json"
echo '{"cases": [{"K": 1, "N": 1, "M": 1, "mode": "w4a16"}]}' >"$work/nobase.json"
expect_refusal "no case has a speed-up over a baseline" "$work/nobase.json" "$work/old.json"
echo '{"cases": [{"K": 8, "N": 8, "M": 1, "mode": "w4a16", "speedup_baseline": {"median": 1}}]}' \
  >"$work/apart.json"
expect_refusal "no case in common" "$work/apart.json" "$work/old.json"
expect_refusal "usage" "$work/new.json"
echo "paired-speedup: all checks passed"
