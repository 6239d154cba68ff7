#!/bin/bash
# Copy the next stashed files to $OUT: at most 8 files and 62 MiB per call; moved to done/.
stash=${STASH:-/tmp/static_stash}; mkdir -p "$stash/done"; n=0; total=0
for f in $(ls "$stash" | grep -v '^done$' | sort); do
  size=$(stat -c %s "$stash/$f")
  if [ $n -ge 8 ] || [ $((total + size)) -gt $((62 * 1048576)) ]; then break; fi
  cp "$stash/$f" "$OUT/$f" && mv "$stash/$f" "$stash/done/$f"; n=$((n + 1)); total=$((total + size))
done
echo "fetched $n files, $total bytes; left: $(ls "$stash" | grep -v '^done$' | wc -l)"
