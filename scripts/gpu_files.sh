#!/usr/bin/env bash
# Weight files bigger than one device call carries (64 MiB a call, the working tree included),
# brought to a warm GPU host over several back-to-back calls.
#
# Here (the CPU machine):  bash scripts/gpu_files.sh pack NAME=PATH ...
#   splits each file into parts of GPU_FILES_PART_MB (default 27) MiB and lays them out one call's
#   load per folder (GPU_FILES_CALL_MB, default 55): .wparts/c0 (beside the carried .whl: at most
#   GPU_FILES_FIRST_MB, default 30), .wparts/c1, ...;
#   each file's sha256 goes into every folder (NAME.sha256) so any call can check a joined file.
#   Prints the carry list of each call.
# There (the GPU host, each call):  source scripts/gpu_files.sh
#   copies the carried parts to $GPU_FILES_DIR/wparts (default /tmp; kept while the machine stays
#   warm: a machine is given back 30 s after a call, so the calls must follow each other at once)
#   and joins every file whose parts are all there into $GPU_FILES_DIR/wfiles/NAME, checked
#   against its sha256; prints what is complete and what is missing.
set -uo pipefail

pack() {
  local part_mb=${GPU_FILES_PART_MB:-27} cap_mb=${GPU_FILES_CALL_MB:-55} first_mb=${GPU_FILES_FIRST_MB:-30}
  rm -rf .wparts && mkdir -p .wparts
  local work; work=$(mktemp -d)
  for spec in "$@"; do
    local name=${spec%%=*} path=${spec#*=}
    [ -f "$path" ] || { echo "no file $path" >&2; return 1; }
    split -b "${part_mb}M" -d -a 2 "$path" "$work/$name."
    sha256sum "$path" | cut -d' ' -f1 > "$work/$name.sha256"
    ls "$work/$name".[0-9][0-9] | wc -l > "$work/$name.count"
  done
  # greedy: the files' parts in the order given, a new folder when the next part does not fit
  # (the first folder travels beside the wheelhouse: GPU_FILES_FIRST_MB)
  local call=0 used=0 cap=$first_mb
  mkdir -p .wparts/c0
  for spec in "$@"; do
    for part in "$work/${spec%%=*}".[0-9][0-9]; do
      local mb=$(( ($(stat -c %s "$part") + 1048575) / 1048576 ))
      if [ $(( used + mb )) -gt "$cap" ]; then
        call=$(( call + 1 )); used=0; cap=$cap_mb; mkdir -p ".wparts/c$call"
      fi
      mv "$part" ".wparts/c$call/"; used=$(( used + mb ))
    done
  done
  for d in .wparts/c*; do cp "$work"/*.sha256 "$work"/*.count "$d/"; done
  rm -rf "$work"
  for d in .wparts/c*; do echo "$d: $(du -sm "$d" | cut -f1) MB: $(ls "$d" | grep -E '\.[0-9]{2}$' | tr '\n' ' ')"; done
}

gather() {
  local base=${GPU_FILES_DIR:-/tmp}
  local parts=$base/wparts files=$base/wfiles
  mkdir -p "$parts" "$files"
  cp .wparts/c*/* "$parts"/ 2>/dev/null
  for count in "$parts"/*.count; do
    [ -e "$count" ] || continue
    local name; name=$(basename "$count" .count)
    local want; want=$(cat "$count")
    local have; have=$(ls "$parts/$name".[0-9][0-9] 2>/dev/null | wc -l)
    if [ -e "$files/$name" ]; then echo "file $name: ready"; continue; fi
    if [ "$have" -lt "$want" ]; then echo "file $name: $have of $want parts"; continue; fi
    cat "$parts/$name".[0-9][0-9] > "$files/$name.tmp"
    if [ "$(sha256sum "$files/$name.tmp" | cut -d' ' -f1)" = "$(cat "$parts/$name.sha256")" ]; then
      mv "$files/$name.tmp" "$files/$name"; rm -f "$parts/$name".[0-9][0-9]
      echo "file $name: ready (joined, sha256 checked)"
    else
      rm -f "$files/$name.tmp"; echo "file $name: parts joined to a wrong sha256"
    fi
  done
}

if [ "${1:-}" = pack ]; then shift; pack "$@"; else gather; fi
