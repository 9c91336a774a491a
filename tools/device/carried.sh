# Sourced by the device scripts (from the repo root, on the GPU machine): unpacks what the
# call carried in .device-carry/ (ferrolm.xz: the stripped release binary, xz-compressed;
# llama.tar.xz: ../shared/bench's archive, unpacked once while the machine stays warm; either
# may be absent where the call does not need it; tools/device/pack.sh makes both) and sets the
# names the scripts share:
#   D the carried folder, T this folder, M the synthesized models (ignored, so they stay
#   between calls on a warm machine), L llama.cpp's binaries, B ferrolm.
D=.device-carry; T=tools/device; M=target/device-models; L=target/anchor/bin
B=target/dev-bin/ferrolm
mkdir -p "$(dirname $B)" $L $M
[ -f $D/ferrolm.xz ] && xz -d -c $D/ferrolm.xz > $B && chmod +x $B
[ -x $L/llama-batched-bench ] || { [ -f $D/llama.tar.xz ] && tar xJf $D/llama.tar.xz -C $L; }
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
