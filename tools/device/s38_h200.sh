#!/bin/bash
# Session 38's last call: the MoE bars with the session's defaults beside llama-bench on
# whichever card comes (the issue's bars are the H200's): tg128 of OLMoE and qwen3-30b-a3b,
# OLMoE at -d 16384. Usage, from the repo root, .device-carry/ holding ferrolm.xz and
# llama.tar.xz: bash tools/device/s38_h200.sh
PRESETS="olmoe-1b-7b qwen3-30b-a3b" DEPTH_PRESETS=olmoe-1b-7b SWITCHES=" " bash tools/device/s38_sweep.sh
