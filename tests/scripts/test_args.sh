#!/usr/bin/env bash
# ctest Scripts.Args: every shell script a user runs (scripts/, datasets/*/make.sh, bench/)
# answers --help with its leading comment block and exit 0, and takes an unknown option or too
# many arguments as a usage error (exit 2), before it installs, builds, trains or writes anything
# (scripts/args.sh). A script is run only once it is seen to call script_args, so that a script
# without it is reported here and never started with "--help" as its output directory.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "Scripts.Args: $*" >&2; exit 1; }
header() { sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$1"; }

# The helper itself, on a script that takes at most one argument.
cat >"$tmp/one.sh" <<SCRIPT
#!/usr/bin/env bash
# one.sh: takes an optional directory.
#   one.sh [DIR]
set -euo pipefail
. "$root/scripts/args.sh"
script_args 1 "\$@"
echo "ran with \$#"
SCRIPT
for h in --help -h; do
  out=$(bash "$tmp/one.sh" "$h") || fail "one.sh $h exited $?, not 0"
  [ "$out" = "$(header "$tmp/one.sh")" ] || fail "one.sh $h printed '$out', not its header"
done
out=$(bash "$tmp/one.sh" dir --help) || fail "one.sh dir --help exited $?, not 0"
[ "$out" = "$(header "$tmp/one.sh")" ] || fail "one.sh dir --help printed '$out'"
set +e
err=$(bash "$tmp/one.sh" --bogus 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" = 2 ] || fail "one.sh --bogus exited $rc, not 2"
case "$err" in *"unknown option '--bogus'"*) ;; *) fail "one.sh --bogus said '$err'" ;; esac
set +e
err=$(bash "$tmp/one.sh" a b 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" = 2 ] || fail "one.sh a b exited $rc, not 2"
case "$err" in *"at most 1 argument(s), got 2"*) ;; *) fail "one.sh a b said '$err'" ;; esac
[ "$(bash "$tmp/one.sh")" = "ran with 0" ] || fail "one.sh without arguments did not run"
[ "$(bash "$tmp/one.sh" d)" = "ran with 1" ] || fail "one.sh d did not run"

# Every script a user runs calls it, and so answers --help and refuses an unknown option.
scripts=()
for f in "$root"/scripts/*.sh "$root"/datasets/*/make.sh "$root"/bench/*.sh; do
  case "$(basename "$f")" in
    args.sh) continue ;;
    vs_torch.sh) continue ;;  # passes seqtape's own options on: its --help is checked below
  esac
  grep -q '^script_args [0-9]* "\$@"$' "$f" || fail "${f#"$root"/} does not call script_args"
  scripts+=("$f")
done
[ "${#scripts[@]}" -ge 10 ] || fail "found only ${#scripts[@]} scripts"
cd "$tmp"
for f in "${scripts[@]}"; do
  name=${f#"$root"/}
  out=$(timeout 30 bash "$f" --help) || fail "$name --help exited $?, not 0"
  [ -n "$out" ] && [ "$out" = "$(header "$f")" ] || fail "$name --help did not print its header"
  set +e
  timeout 30 bash "$f" --no-such-option >/dev/null 2>&1; rc=$?
  set -e
  [ "$rc" = 2 ] || fail "$name --no-such-option exited $rc, not 2"
done
[ -z "$(ls -A "$tmp" | grep -v '^one.sh$')" ] || fail "a script wrote into its working directory"

out=$(bash "$root/bench/vs_torch.sh" --help) || fail "bench/vs_torch.sh --help exited $?, not 0"
[ -n "$out" ] || fail "bench/vs_torch.sh --help printed nothing"
set +e
bash "$root/bench/vs_torch.sh" >/dev/null 2>&1; rc=$?
set -e
[ "$rc" = 2 ] || fail "bench/vs_torch.sh without arguments exited $rc, not 2"
echo "Scripts.Args: ${#scripts[@]} scripts answer --help and refuse an unknown option"
