#!/usr/bin/env bash
# Every command `nibble completion bash` offers must exist in this build, and every flag it offers
# for a command must be one that command documents in its --help (so one its parser takes).
set -u
nibble="$1"
script=$("$nibble" completion bash) || { echo "nibble completion bash failed"; exit 1; }
status=0
commands=$(printf '%s\n' "$script" | sed -n 's/.*compgen -W "\([a-z ]*\)" -- "\$cur".*/\1/p' | head -1)
[ -n "$commands" ] || { echo "no command list in the completion script"; exit 1; }
for cmd in $commands; do
  flags=$(printf '%s\n' "$script" | sed -n "s/^ *$cmd) COMPREPLY=(\$(compgen -W \"\([^\"]*\)\".*/\1/p")
  help=$("$nibble" "$cmd" --help 2>&1)
  if printf '%s\n' "$help" | grep -qi "unknown command"; then
    echo "completion offers the command $cmd, which this build of nibble does not have"
    status=1
    continue
  fi
  for flag in $flags; do
    [ "$flag" = --help ] && continue  # what the check itself runs
    if ! printf '%s\n' "$help" | grep -q -- "$flag\b"; then
      echo "nibble $cmd: completion offers $flag, which 'nibble $cmd --help' does not mention"
      status=1
    fi
  done
done
[ "$status" -eq 0 ] && echo "completion flags match every command's --help"
exit "$status"
