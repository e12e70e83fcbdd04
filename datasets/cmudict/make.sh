#!/usr/bin/env bash
# Builds a grapheme-to-phoneme set from Debian's festlex-cmu (CMU Pronouncing Dictionary 0.4 as
# Festival ships it): train.tsv, valid.tsv, test.tsv (word TAB phonemes). The rules are in
# datasets/cmudict/README.md. The output is generated, never committed.
#
#   bash datasets/cmudict/make.sh [OUT_DIR]      (default: the directory of this script)
#
# Needs the festlex-cmu package (scripts/setup.sh installs it) and perl (always present on
# Debian: perl-base is essential), as datasets/de-en/make.sh does.
set -euo pipefail
. "$(dirname "$0")/../../scripts/args.sh"
script_args 1 "$@"

here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here}"
dict="${SEQTAPE_CMUDICT:-/usr/share/festival/dicts/cmu/cmudict-0.4.out}"

if [ ! -r "$dict" ]; then
  echo "make.sh: $dict not found: install the Debian package festlex-cmu (scripts/setup.sh)" >&2
  exit 3
fi
mkdir -p "$out"

LC_ALL=C perl -e '
use strict;
use warnings;

my ($dict, $out) = @ARGV;

# FNV-1a, 32 bit, over the bytes of the word (as datasets/de-en/make.sh): the split depends on
# the word alone, so all pronunciations of a word land in the same split.
sub fnv1a {
  my $h = 2166136261;
  for my $b (unpack("C*", $_[0])) { $h = (($h ^ $b) * 16777619) & 0xffffffff; }
  return $h;
}

open(my $in, "<", $dict) or die "$dict: $!\n";
my (%prons, %seen);
my ($entries, $not_words, $duplicates) = (0, 0, 0);
while (my $line = <$in>) {
  chomp $line;
  next if $. == 1 && $line eq "MNCL";    # the lexicon header Festival writes
  # ("word" part-of-speech (((syllable phones) stress) ...))
  $line =~ /^\("([^"]*)" \S+ \((.*)\)\)$/ or die "$dict:$.: not a lexicon entry: $line\n";
  my ($word, $syllables) = (lc $1, $2);
  $entries++;
  # Only words of letters: an entry with a digit, an apostrophe or other punctuation would be
  # skipped whole (this version of the dictionary has none).
  if ($word !~ /^[a-z]+$/) { $not_words++; next; }
  (my $flat = $syllables) =~ s/[()]/ /g;
  # Each syllable ends with its stress digit (0, 1, 2): dropped, the phones flattened.
  my @phones = grep { !/^[0-9]+$/ } split " ", $flat;
  for my $p (@phones) { $p =~ /^[a-z]+$/ or die "$dict:$.: phone \"$p\" in $line\n"; }
  die "$dict:$.: no phones in $line\n" unless @phones;
  my $pron = join " ", @phones;
  # A word is listed once per part of speech, often with the same phones: kept once.
  if ($seen{"$word\t$pron"}++) { $duplicates++; next; }
  push @{ $prons{$word} }, $pron;
}
close $in;

my %fh;
for my $split (qw(train valid test)) {
  open($fh{$split}, ">", "$out/$split.tsv") or die "$out/$split.tsv: $!\n";
}
my (%words, %lines, %multi);
for my $word (sort keys %prons) {
  my $bucket = fnv1a($word) % 20;
  my $split = $bucket == 0 ? "test" : $bucket == 1 ? "valid" : "train";
  # One line per pronunciation, consecutive: the TSV convention for several references.
  for my $pron (@{ $prons{$word} }) {
    print { $fh{$split} } "$word\t$pron\n" or die "$out/$split.tsv: $!\n";
    $lines{$split}++;
  }
  $words{$split}++;
  $multi{$split}++ if @{ $prons{$word} } > 1;
}
for my $split (keys %fh) { close($fh{$split}) or die "$out/$split.tsv: $!\n"; }
printf "cmudict: %d entries, %d not words (skipped), %d repeated pronunciations dropped, " .
       "%d distinct words\n", $entries, $not_words, $duplicates, scalar keys %prons;
for my $split (qw(train valid test)) {
  printf "cmudict: %s %d words (%d with several pronunciations), %d lines\n",
         $split, $words{$split} // 0, $multi{$split} // 0, $lines{$split} // 0;
}
' "$dict" "$out"
