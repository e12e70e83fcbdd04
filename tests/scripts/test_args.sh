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
# The exit status of a command, its output dropped (set -e would stop at a non-zero one).
status() { "$@" >/dev/null 2>&1 && echo 0 || echo $?; }
. "$root/scripts/args.sh"  # script_usage FILE: the header a script's --help must print

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
expected=$'one.sh: takes an optional directory.\n  one.sh [DIR]'
for args in --help -h "dir --help"; do
  # shellcheck disable=SC2086  # "dir --help" is two arguments
  out=$(bash "$tmp/one.sh" $args) || fail "one.sh $args exited $?, not 0"
  [ "$out" = "$expected" ] || fail "one.sh $args printed '$out', not its header"
done
[ "$(status bash "$tmp/one.sh" --bogus)" = 2 ] || fail "one.sh --bogus did not exit 2"
case "$(bash "$tmp/one.sh" --bogus 2>&1)" in
  *"unknown option '--bogus'"*) ;; *) fail "one.sh --bogus did not name the option" ;; esac
[ "$(status bash "$tmp/one.sh" a b)" = 2 ] || fail "one.sh a b did not exit 2"
case "$(bash "$tmp/one.sh" a b 2>&1)" in
  *"at most 1 argument(s), got 2"*) ;; *) fail "one.sh a b did not say how many it takes" ;; esac
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
  [ -n "$out" ] && [ "$out" = "$(script_usage "$f")" ] || fail "$name --help did not print its header"
  rc=$(status timeout 30 bash "$f" --no-such-option)
  [ "$rc" = 2 ] || fail "$name --no-such-option exited $rc, not 2"
done
[ -z "$(ls -A "$tmp" | grep -v '^one.sh$')" ] || fail "a script wrote into its working directory"

out=$(bash "$root/bench/vs_torch.sh" --help) || fail "bench/vs_torch.sh --help exited $?, not 0"
[ -n "$out" ] || fail "bench/vs_torch.sh --help printed nothing"
rc=$(status bash "$root/bench/vs_torch.sh")
[ "$rc" = 2 ] || fail "bench/vs_torch.sh without arguments exited $rc, not 2"
echo "Scripts.Args: ${#scripts[@]} scripts answer --help and refuse an unknown option"
