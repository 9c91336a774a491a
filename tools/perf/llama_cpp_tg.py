#!/usr/bin/env python3
"""llama.cpp's CPU decode speed as llama-bench times tg, through llama-cpp-python.

From an empty context, one token a step and the logits of each; 128 steps, a warm-up run and
three timed runs. Build llama.cpp natively first:
    CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python==0.3.36
usage: llama_cpp_tg.py MODEL.gguf [THREADS]
Compare with `ferrolm bench -m MODEL.gguf -p 0 -n 128 -r 3 -t THREADS`, interleaved.
"""
import sys
import time

from llama_cpp import Llama


def main():
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    m = Llama(model_path=sys.argv[1], n_threads=threads, n_threads_batch=threads, n_ctx=512,
              verbose=False)
    n = 128
    rates = []
    for _ in range(4):
        m.reset()
        t = time.perf_counter()
        for i in range(n):
            m.eval([1 + (i * 37) % 1000])
        rates.append(n / (time.perf_counter() - t))
    print("llama.cpp tg128 runs:", " ".join(f"{x:.1f}" for x in rates[1:]))


if __name__ == "__main__":
    main()
