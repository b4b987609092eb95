#!/usr/bin/env bash
# Writes fuzz/corpus/packed_index: index.bin files written by `dtrain data pack`
# over small ImageFolders of the image_decode seeds (13 images in 3 classes;
# 2 images in 1 class).
#
#   make_packed_seeds.sh DTRAIN_BINARY FUZZ_DIR
set -euo pipefail
dtrain="$1" fuzz="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/folder/cat" "$work/folder/dog" "$work/folder/ship" "$fuzz/corpus/packed_index"
i=0
for f in "$fuzz"/corpus/image_decode/*; do
  case "$f" in *.jpg) ext=jpg ;; *.png) ext=png ;; *) continue ;; esac
  classes=(cat dog ship)
  tail -c +10 "$f" >"$work/folder/${classes[i % 3]}/img-$i.$ext"  # drop the 9-byte prefix
  i=$((i + 1))
done
"$dtrain" data pack "$work/folder" "$work/one" >/dev/null
cp "$work/one/index.bin" "$fuzz/corpus/packed_index/one-shard"
mkdir -p "$work/small/only"
cp "$work"/folder/cat/img-0.* "$work"/folder/dog/img-1.* "$work/small/only/"
"$dtrain" data pack "$work/small" "$work/two" >/dev/null
cp "$work/two/index.bin" "$fuzz/corpus/packed_index/one-class-two-images"
