#!/usr/bin/env bash
# Checks that every tracked C++ source follows .clang-format (the `format` ctest; CI runs it).
#   scripts/check-format.sh         list the files that differ, exit 1 if any
#   scripts/check-format.sh --fix   rewrite them in place
# Formatting differs between clang-format releases, so the check needs the version the style was
# fixed with (14, Debian 12's clang-format package, installed by scripts/setup.sh); with another
# version it reports a skip (exit 77) rather than a false failure.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
want=14
cf=""
for c in clang-format-$want clang-format; do
  if command -v "$c" >/dev/null 2>&1 && "$c" --version | grep -q "version $want\."; then cf=$c; break; fi
done
if [[ -z $cf ]]; then
  echo "check-format: clang-format $want not found (scripts/setup.sh installs it); skipped"
  exit 77
fi
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' 2>/dev/null || find lib jit include tests bench examples tools -name '*.[ch]pp')
if [[ ${1:-} == --fix ]]; then
  "$cf" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$cf" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  printf 'check-format: %d file(s) differ from .clang-format; fix with scripts/check-format.sh --fix:\n' "${#bad[@]}"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check-format: ${#files[@]} files follow .clang-format"
