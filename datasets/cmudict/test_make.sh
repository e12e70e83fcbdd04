#!/usr/bin/env bash
# ctest Datasets.Cmudict: runs make.sh twice into temp directories and checks the rules of
# datasets/cmudict/README.md on what it wrote. Exit 0 when every check holds, 1 naming the first
# that does not.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "Datasets.Cmudict: $*" >&2; exit 1; }

bash "$here/make.sh" "$tmp/a" >/dev/null
bash "$here/make.sh" "$tmp/b" >/dev/null
for s in train valid test; do
  [ -s "$tmp/a/$s.tsv" ] || fail "$s.tsv is missing or empty"
  cmp -s "$tmp/a/$s.tsv" "$tmp/b/$s.tsv" || fail "$s.tsv differs between two runs"
done

cd "$tmp/a"
# Every line: a lower-case word of letters, one tab, phones of lower-case letters (no stress
# digit) separated by single spaces.
bad=$(LC_ALL=C grep -vnE '^[a-z]+	[a-z]+( [a-z]+)*$' train.tsv valid.tsv test.tsv | head -1 || true)
[ -z "$bad" ] || fail "a line breaks the format: $bad"
# No word in two splits.
both=$(cut -f1 train.tsv valid.tsv test.tsv | LC_ALL=C sort -u | wc -l)
sum=0
for s in train valid test; do
  sum=$((sum + $(cut -f1 "$s.tsv" | LC_ALL=C sort -u | wc -l)))
done
[ "$both" -eq "$sum" ] || fail "$((sum - both)) words sit in more than one split"
# A word's lines are consecutive (one source with several references), and no line repeats.
for s in train valid test; do
  gaps=$(awk -F'\t' 'seen[$1]++ && $1 != prev {print FILENAME ":" NR ": " $1} {prev = $1}' "$s.tsv" | head -1)
  [ -z "$gaps" ] || fail "a word's pronunciations are not consecutive: $gaps"
  dups=$(LC_ALL=C sort "$s.tsv" | uniq -d | head -1)
  [ -z "$dups" ] || fail "$s.tsv repeats a line: $dups"
done
# Several pronunciations are kept: the dictionary lists "a" as ax (determiner) and ey (noun),
# "live" as l ay v and l ih v; and more than a hundred words have two or more.
cat train.tsv valid.tsv test.tsv > all.tsv
for want in 'a	ax' 'a	ey' 'live	l ay v' 'live	l ih v'; do
  grep -qxF "$want" all.tsv || fail "the pronunciation '$want' is missing"
done
multi=$(cut -f1 all.tsv | uniq -d | wc -l)
[ "$multi" -gt 100 ] || fail "only $multi words kept several pronunciations"
# A repeated part-of-speech entry with the same phones is kept once: "lead" is listed three
# times in the dictionary (n, v, v_p) with two distinct pronunciations.
[ "$(grep -c '^lead	' all.tsv)" -eq 2 ] || fail "lead should have exactly 2 pronunciations"
# Words the dictionary lists only capitalised are lower-cased, not lost.
for want in afrocentric awol fdic; do
  grep -q "^$want	" all.tsv || fail "the capitalised entry '$want' is missing"
done
echo "Datasets.Cmudict: 1 passed, 0 failed"
