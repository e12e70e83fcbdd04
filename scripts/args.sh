# Sourced first by the project's shell scripts, as `script_args MAX "$@"` after it: `-h` or
# `--help` prints the script's leading comment block and exits 0; any other argument that starts
# with "-" is no option of these scripts, and more than MAX other arguments are too many: both are
# usage errors (exit 2), where they would otherwise be taken as a directory named "--help".

# The leading comment block of a script (default: the calling one), without the "# " of each line.
script_usage() { sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "${1:-$0}"; }

script_args() {
  local max=$1 count=0 arg name
  shift
  name=$(basename "$0")
  for arg in "$@"; do
    case "$arg" in
      -h | --help)
        script_usage
        exit 0
        ;;
      -*)
        echo "$name: unknown option '$arg' (--help says what it takes)" >&2
        exit 2
        ;;
      *) count=$((count + 1)) ;;
    esac
  done
  if [ "$count" -gt "$max" ]; then
    if [ "$max" -eq 0 ]; then
      echo "$name: takes no arguments, got $count (--help says what it takes)" >&2
    else
      echo "$name: takes at most $max argument(s), got $count (--help says what it takes)" >&2
    fi
    exit 2
  fi
}
