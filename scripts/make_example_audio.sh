#!/usr/bin/env bash
# Makes the example recordings in examples/audio/ (committed; run by hand, never in CI).
#
#   scripts/make_example_audio.sh [OUTDIR]        (default: examples/audio)
#
# Needs espeak-ng, flite, festival with two voices, and sox (apt-get install -y espeak-ng flite
# sox festival festvox-us-slt-hts festvox-kallpc16k). Each file is:
# synthesise -> trim the synthesiser's own silence -> peak-normalise to -3 dBFS -> (effects)
# -> resample/convert -> pad with digital silence. SoX runs with -D (no dither: the padding
# is exact zeros, and a re-run with the same tool versions gives byte-identical files; the
# versions used are in examples/audio/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-examples/audio}
mkdir -p "$OUT"
for tool in espeak-ng flite sox text2wave; do
  command -v "$tool" >/dev/null || { echo "$tool not found (apt-get install -y espeak-ng flite sox festival" \
    "festvox-us-slt-hts festvox-kallpc16k)" >&2; exit 1; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Trim below 0.2 % of full scale at both ends (the synthesisers add their own silence).
TRIM=(silence 1 0.005 0.2% reverse silence 1 0.005 0.2% reverse)

# speak ENGINE VOICE RATE TEXT DEST: raw synthesiser output (espeak-ng: 22.05 kHz; flite and
# festival: the voice's own rate). RATE is words per minute for espeak-ng, a duration stretch
# for flite, unused for festival (VOICE is a festival voice function: voice_cmu_us_slt_arctic_hts,
# an HTS voice, the most natural of these; voice_kal_diphone).
speak() {
  local engine=$1 voice=$2 rate=$3 text=$4 dest=$5
  case $engine in
    espeak-ng) espeak-ng -v "$voice" -s "$rate" -w "$dest" "$text" ;;
    flite) flite -voice "$voice" --setf duration_stretch="$rate" -t "$text" -o "$dest" ;;
    festival) echo "$text" | text2wave -eval "($voice)" -o "$dest" ;;
  esac
}

# clip NAME ENGINE VOICE RATE PAD_S TEXT -- OUTPUT_FORMAT... [-- EFFECTS...]
clip() {
  local name=$1 engine=$2 voice=$3 rate=$4 pad=$5 text=$6
  shift 6; [[ $1 == -- ]] && shift
  local fmt=() fx=()
  while (($#)) && [[ $1 != -- ]]; do fmt+=("$1"); shift; done
  (($#)) && shift && fx=("$@")
  speak "$engine" "$voice" "$rate" "$text" "$TMP/raw.wav"
  sox -D "$TMP/raw.wav" "${fmt[@]}" "$OUT/$name" "${TRIM[@]}" gain -n -3 "${fx[@]}" pad "$pad" "$pad"
  echo "$OUT/$name: $(soxi -D "$OUT/$name") s, $(stat -c %s "$OUT/$name") bytes"
}

# 16 kHz, 16-bit signed PCM, mono
clip turn_left_ninety_degrees_16k_s16.wav festival voice_cmu_us_slt_arctic_hts 1 0.5 "turn left ninety degrees" \
  -- -t wavpcm -r 16000 -e signed-integer -b 16 -c 1
# 8 kHz telephone band (300-3400 Hz), 16-bit signed PCM, mono; flite's kal voice is 8 kHz itself
clip go_forward_two_meters_8k_s16.wav flite kal 1.0 0.5 "go forward two meters" \
  -- -t wavpcm -r 8000 -e signed-integer -b 16 -c 1 -- sinc 300-3400
# 44.1 kHz stereo (both channels the same), 8-bit unsigned PCM: 16-bit stereo at 44.1 kHz
# would be 176 kB/s, over the 200 kB budget with the padding
clip robot_stop_44k1_stereo_u8.wav festival voice_kal_diphone 1 0.5 "robot stop" \
  -- -t wavpcm -r 44100 -e unsigned-integer -b 8 -c 2
# 48 kHz, 32-bit float, mono (format tag 3, 18-byte fmt chunk, a fact chunk before data);
# 192 kB/s: a one-word command and 0.2 s padding keep it under 200 kB
clip halt_48k_f32.wav flite slt 1.0 0.2 "halt" \
  -- -t wavpcm -r 48000 -e floating-point -b 32 -c 1
# 22.05 kHz, 24-bit signed PCM, mono, WAVE_FORMAT_EXTENSIBLE header
clip open_the_gripper_22k05_s24.wav festival voice_cmu_us_slt_arctic_hts 1 0.5 "open the gripper" \
  -- -t wav -r 22050 -e signed-integer -b 24 -c 1

# 44.1 kHz, 16-bit stereo (both channels the same) as FLAC, compression level 8: lossless at
# about a quarter of the WAV's size (the side channel is all zero: constant subframes)
clip go_back_two_meters_44k1_stereo_s16.flac festival voice_cmu_us_slt_arctic_hts 1 0.5 "go back two meters" \
  -- -C 8 -r 44100 -e signed-integer -b 16 -c 2

# ~8.4 s at 11.025 kHz, 16-bit signed PCM, mono: two commands with 1.5 s of silence between
speak festival voice_cmu_us_slt_arctic_hts 1 "turn right forty five degrees and go forward three meters" "$TMP/a.wav"
speak festival voice_cmu_us_slt_arctic_hts 1 "set speed ten and open the gripper" "$TMP/b.wav"
for part in a b; do
  sox -D "$TMP/$part.wav" -r 11025 -b 16 "$TMP/${part}_t.wav" "${TRIM[@]}" gain -n -3
done
sox -D -n -r 11025 -b 16 -c 1 "$TMP/gap.wav" trim 0 1.5
sox -D "$TMP/a_t.wav" "$TMP/gap.wav" "$TMP/b_t.wav" -t wavpcm -e signed-integer -b 16 \
  "$OUT/two_commands_11k025_s16.wav" pad 0.5 0.5
echo "$OUT/two_commands_11k025_s16.wav: $(soxi -D "$OUT/two_commands_11k025_s16.wav") s," \
  "$(stat -c %s "$OUT/two_commands_11k025_s16.wav") bytes"
