#!/usr/bin/env bash
# Builds a German->English phrase-translation set from Debian's trans-de-en dictionary (the
# Ding dictionary of TU Chemnitz, GPL-2+): train.tsv, valid.tsv, test.tsv (source TAB target).
# The rules are in datasets/de-en/README.md. The output is generated, never committed.
#
#   bash datasets/de-en/make.sh [OUT_DIR]      (default: the directory of this script)
#
# Needs the trans-de-en package (scripts/setup.sh installs it) and perl (always present on
# Debian: perl-base is essential).
set -euo pipefail
. "$(dirname "$0")/../../scripts/args.sh"
script_args 1 "$@"

here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here}"
dict="${SEQTAPE_DE_EN_DICT:-/usr/share/trans/de-en}"

if [ ! -r "$dict" ]; then
  echo "make.sh: $dict not found: install the Debian package trans-de-en (scripts/setup.sh)" >&2
  exit 3
fi
mkdir -p "$out"

LC_ALL=C perl -e '
use strict;
use warnings;

my ($dict, $out) = @ARGV;
my $max_words = 4;

# Ding markup inside one alternative -> plain text, or undef when nothing usable is left.
sub clean {
  my ($s) = @_;
  # Bracketed annotations, innermost first: {f} {pl} {vt} grammar, [Br.] [ugs.] [techn.]
  # usage and field labels, (...) explanations, <...> alternative spellings / search keys.
  1 while $s =~ s/\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\)|<[^<>]*>//g;
  $s =~ s{/[^/\s][^/]*/}{}g;      # /IFP/ abbreviations
  $s =~ s/(^|\s)~\S+/$1/g;        # ~word: a related term, not a translation
  return undef if $s =~ /[{}\[\]()<>\/~]/;    # unbalanced or slash alternatives (a/b)
  return undef if $s =~ /\x{e2}\x{80}\x{a6}|\.\.\./;  # "..." / "…": fragments, templates
  $s =~ s/\s+/ /g;
  $s =~ s/^ | $//g;
  $s =~ s/ ([,;:!?.])/$1/g;       # a space left before punctuation by a removed annotation
  $s =~ s/^[,;] ?| ?,$//g;        # a comma left at either end by a removed annotation
  return undef if $s eq "" || $s !~ /[[:alpha:]\x80-\xff]/;
  return undef if $s =~ /^-|-$|:$/;    # affixes (-gänger) and lead-ins ("as follows:")
  my @words = split / /, $s;
  return undef if @words > $max_words;
  return $s;
}

# FNV-1a, 32 bit, over the bytes of the source: the split depends on nothing else.
sub fnv1a {
  my $h = 2166136261;
  for my $b (unpack("C*", $_[0])) { $h = (($h ^ $b) * 16777619) & 0xffffffff; }
  return $h;
}

open(my $in, "<", $dict) or die "$dict: $!\n";
my (%target_of, @order);
my ($entries, $misaligned, $pairs_seen) = (0, 0, 0);
while (my $line = <$in>) {
  chomp $line;
  next if $line =~ /^#/ || $line !~ / :: /;
  my ($de, $en, @rest) = split / :: /, $line;
  next if @rest || !defined $en;
  $entries++;
  my @de_parts = split /\s*\|\s*/, $de, -1;
  my @en_parts = split /\s*\|\s*/, $en, -1;
  if (@de_parts != @en_parts) { $misaligned++; next; }
  for my $i (0 .. $#de_parts) {
    # Remove the brackets before splitting on ";" because a few annotations hold one ({prp; +Dat.}).
    my ($d, $e) = ($de_parts[$i], $en_parts[$i]);
    1 while $d =~ s/\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\)|<[^<>]*>//g;
    1 while $e =~ s/\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\)|<[^<>]*>//g;
    my @targets = grep { defined } map { clean($_) } split /;/, $e;
    next unless @targets;
    for my $src (grep { defined } map { clean($_) } split /;/, $d) {
      $pairs_seen++;
      next if exists $target_of{$src};    # the first translation in dictionary order wins
      $target_of{$src} = $targets[0];
      push @order, $src;
    }
  }
}
close $in;

my %fh;
for my $split (qw(train valid test)) {
  open($fh{$split}, ">", "$out/$split.tsv") or die "$out/$split.tsv: $!\n";
}
my %count = (train => 0, valid => 0, test => 0);
for my $src (@order) {
  my $bucket = fnv1a($src) % 200;
  my $split = $bucket == 0 ? "test" : $bucket == 1 ? "valid" : "train";
  print { $fh{$split} } "$src\t$target_of{$src}\n" or die "$out/$split.tsv: $!\n";
  $count{$split}++;
}
for my $split (keys %fh) { close($fh{$split}) or die "$out/$split.tsv: $!\n"; }
printf "de-en: %d dictionary entries (%d with unequal | groups skipped), %d phrase pairs, " .
       "%d distinct sources\n", $entries, $misaligned, $pairs_seen, scalar @order;
printf "de-en: train %d, valid %d, test %d lines in %s\n",
       $count{train}, $count{valid}, $count{test}, $out;
' "$dict" "$out"
