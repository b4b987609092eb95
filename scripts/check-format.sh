#!/usr/bin/env bash
# Checks that the tree's C++ files are formatted as the repository's
# .clang-format says, with clang-format 14 (Debian 12's; other releases format
# some constructs differently, so CI and developers must use the same one).
# scripts/test.sh runs it as its first check, before the build.
#
#   scripts/check-format.sh               check every tracked C++ file
#   scripts/check-format.sh --fix         reformat them in place
#   scripts/check-format.sh [--fix] PATH...  only these files or folders
#
# C++ files: *.h *.hpp *.cc *.cpp *.cu *.cuh known to git (untracked files
# too when they are not ignored); outside a git checkout, those under src/,
# include/, tests/, bench/ and examples/.
#
# Exit status: 0 when every file is formatted (or was fixed), 1 when some are
# not (each is named, with the command that fixes it), 2 on usage errors or
# when clang-format 14 is missing.
#
# Environment:
#   CLANG_FORMAT  the clang-format binary (default clang-format-14)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly CLANG_FORMAT="${CLANG_FORMAT:-clang-format-14}"
readonly EXTENSIONS=(h hpp cc cpp cu cuh)

log() { printf '==> check-format: %s\n' "$*"; }
usage_error() {
  printf '==> check-format: %s\n' "$*" >&2
  printf 'usage: scripts/check-format.sh [--fix] [PATH...]\n' >&2
  exit 2
}

# Prints the C++ files under the given paths (default: the whole tree), one
# per line, relative to the repository root.
cpp_files() {
  local patterns=() ext
  if git -C "$REPO_ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    local roots=("$@")
    [[ ${#roots[@]} -gt 0 ]] || roots=(.)
    for root in "${roots[@]}"; do
      for ext in "${EXTENSIONS[@]}"; do
        if [[ -d "$root" ]]; then
          patterns+=("${root%/}/*.${ext}")
        elif [[ "$root" == *."$ext" ]]; then
          patterns+=("$root")
        fi
      done
    done
    [[ ${#patterns[@]} -gt 0 ]] || return 0
    # Tracked files and untracked ones git does not ignore; deleted ones are
    # listed by --cached until committed, so keep only what exists.
    git -C "$REPO_ROOT" ls-files --cached --others --exclude-standard -- "${patterns[@]}" |
      sort -u | while IFS= read -r f; do [[ -f "$REPO_ROOT/$f" ]] && printf '%s\n' "$f"; done
  else
    local roots=("$@")
    [[ ${#roots[@]} -gt 0 ]] || roots=(src include tests bench examples)
    local find_args=()
    for ext in "${EXTENSIONS[@]}"; do find_args+=(-o -name "*.${ext}"); done
    (cd "$REPO_ROOT" && find "${roots[@]}" -type f \( "${find_args[@]:1}" \) 2>/dev/null | sort)
  fi
}

main() {
  local fix=0 paths=()
  for arg in "$@"; do
    case "$arg" in
      --fix) fix=1 ;;
      -h | --help)
        sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
        return 0
        ;;
      -*) usage_error "unknown option '$arg'" ;;
      *) paths+=("$arg") ;;
    esac
  done

  if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
    printf '==> check-format: %s not found: install it with scripts/install-deps.sh (or apt-get install clang-format-14), or set CLANG_FORMAT\n' \
      "$CLANG_FORMAT" >&2
    return 2
  fi
  local version
  version="$("$CLANG_FORMAT" --version)"
  if [[ "$version" != *"version 14."* ]]; then
    printf '==> check-format: %s is not clang-format 14 (%s): other releases format differently; install clang-format-14\n' \
      "$CLANG_FORMAT" "$version" >&2
    return 2
  fi

  cd "$REPO_ROOT"
  local p
  for p in "${paths[@]}"; do
    [[ -e "$p" ]] || usage_error "no such file or folder: $p"
  done
  local files=()
  mapfile -t files < <(cpp_files "${paths[@]}")
  if [[ ${#files[@]} -eq 0 ]]; then
    log "no C++ files to check"
    return 0
  fi

  if [[ $fix -eq 1 ]]; then
    "$CLANG_FORMAT" -i --style=file "${files[@]}"
    log "formatted ${#files[@]} file(s)"
    return 0
  fi

  # One clang-format per file so each unformatted file is named once, however
  # many lines it gets wrong; xargs -P keeps it quick on a big tree.
  local bad=()
  mapfile -t bad < <(printf '%s\0' "${files[@]}" |
    xargs -0 -n 1 -P "$(nproc)" sh -c \
      '"$0" --dry-run --Werror --style=file "$1" >/dev/null 2>&1 || printf "%s\n" "$1"' \
      "$CLANG_FORMAT" | sort)
  if [[ ${#bad[@]} -eq 0 ]]; then
    log "${#files[@]} file(s) formatted as .clang-format says"
    return 0
  fi
  log "${#bad[@]} of ${#files[@]} file(s) are not formatted as .clang-format says:"
  printf '    %s\n' "${bad[@]}"
  log "see the changes with: $CLANG_FORMAT --dry-run FILE; fix them with: scripts/check-format.sh --fix [FILE...]"
  return 1
}

main "$@"
