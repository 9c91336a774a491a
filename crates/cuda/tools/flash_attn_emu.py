"""Lane-level host emulation of kernels/flash_attn.cu, for checking its fragment indexing at every
head size it takes (32, 64, 80, 96, 128) without a GPU: `python3 crates/cuda/tools/flash_attn_emu.py`
(numpy only).

ldmatrix and mma.m16n8k16 are modelled from the PTX ISA's fragment layouts; the kernel body
below mirrors the .cu index expressions one for one (keep them in step when the kernel
changes). Rounding is modelled too (f16 q·scale·log2e and P, f32 elsewhere), so the printed
error, relative to sum(p·|v|), should sit near 5e-4, under cuda-parity's 2e-3 bound; a wrong
mask, fragment or address gives O(0.1..1). Exits non-zero above the bound. The sliding window
(`window` > 0: keys pos - window < k <= pos) is mirrored too: the first tile, the edge mask and
the maximum of a row that has seen no key yet (fa_finite).
"""
import numpy as np
rng = np.random.default_rng(5)
FA_NWARPS, FA_BK, FA_PAD = 4, 64, 8
FA_BQ = 16 * FA_NWARPS
f16 = lambda x: np.float32(np.float16(x))
first_key = lambda n_keys, window: max(0, n_keys - window) if window > 0 else 0  # attn_first_key
finite = lambda m: 0.0 if m == -np.inf else m  # fa_finite

def ldmatrix(smem, addrs, trans, n_mtx=4):
    # addrs[lane] = half offset of row (lane%8) of matrix lane//8 (lanes past 8·n_mtx unused).
    # Returns r[lane][n_mtx] of (lo, hi).
    out = [[None]*n_mtx for _ in range(32)]
    for mtx in range(n_mtx):
        rows = [smem[addrs[8*mtx + i]: addrs[8*mtx + i] + 8] for i in range(8)]
        M = np.array(rows)  # M[row][col]
        for T in range(32):
            if not trans:
                out[T][mtx] = (M[T//4][2*(T%4)], M[T//4][2*(T%4)+1])
            else:
                out[T][mtx] = (M[2*(T%4)][T//4], M[2*(T%4)+1][T//4])
    return out

def mma(c, a, b0, b1):
    # c[lane][4], a[lane][4] pairs, b0/b1[lane] pairs
    A = np.zeros((16, 16)); B = np.zeros((16, 8)); C = np.zeros((16, 8))
    for T in range(32):
        g, t = T // 4, T % 4
        for reg, (r, k) in enumerate([(g, 2*t), (g+8, 2*t), (g, 2*t+8), (g+8, 2*t+8)]):
            A[r][k], A[r][k+1] = a[T][reg]
        B[2*t][g], B[2*t+1][g] = b0[T]; B[2*t+8][g], B[2*t+9][g] = b1[T]
        C[g][2*t], C[g][2*t+1], C[g+8][2*t], C[g+8][2*t+1] = c[T]
    C = C + A @ B
    for T in range(32):
        g, t = T // 4, T % 4
        c[T] = [C[g][2*t], C[g][2*t+1], C[g+8][2*t], C[g+8][2*t+1]]

def kernel(q, kc, vc, pos, out, n_q, n_head, n_kv, n_ctx, scale, D, bx, gx, by, window):
    STRIDE = D + FA_PAD; TILE = FA_BK * STRIDE; DK = D//16; DN = D//8; KN = FA_BK//8; KC = FA_BK//16
    group = n_head // n_kv; kvh = by
    smem = np.zeros(2 * 2 * TILE, np.float32)
    W = {}
    smax, smin = 0, 1 << 31
    for warp in range(FA_NWARPS):
        for lane in range(32):
            g, t4 = lane // 4, lane % 4
            row_base = (gx - 1 - bx) * FA_BQ + warp * 16 + g
            st = dict(rp=[0, 0], rf=[0, 0], act=[False, False], at=[0, 0])
            for i in range(2):
                r = row_base + 8*i; t = r // group
                st['act'][i] = t < n_q
                st['rp'][i] = int(pos[t]) if t < n_q else 0
                st['rf'][i] = first_key(st['rp'][i] + 1, window)
                st['at'][i] = (t * n_head + kvh * group + r % group) * D
                if st['act'][i]:
                    smax = max(smax, st['rp'][i]); smin = min(smin, st['rp'][i])
            qs = scale * 1.4426950408889634
            qf = [[None]*4 for _ in range(DK)]
            for kk in range(DK):
                for half in range(2):
                    for i in range(2):
                        v = (0.0, 0.0)
                        if st['act'][i]:
                            o = st['at'][i] + 16*kk + 8*half + 2*t4
                            v = (q[o], q[o+1])
                        qf[kk][2*half+i] = (f16(v[0]*qs), f16(v[1]*qs))
            st['qf'] = qf
            st['o'] = [[0.0]*4 for _ in range(DN)]
            st['m'] = [-np.inf, -np.inf]; st['l'] = [0.0, 0.0]
            W[(warp, lane)] = st
    n_keys = smax + 1; all_see = smin + 1
    lo, masked_below = first_key(all_see, window), first_key(n_keys, window)
    kh = kvh * n_ctx * D
    def load(stage, k0):
        CH = D // 8
        for i in range(FA_BK * CH):
            key, c = i // CH, i % CH
            valid = k0 + key < n_keys
            at = (k0 + key) * D + 8*c if valid else 0
            dst = stage + key * STRIDE + 8*c
            smem[dst:dst+8] = kc[kh+at:kh+at+8] if valid else 0
            smem[dst+TILE:dst+TILE+8] = vc[kh+at:kh+at+8] if valid else 0
    tile0 = lo // FA_BK; n_tiles = (n_keys + FA_BK - 1) // FA_BK - tile0
    for it in range(n_tiles):
        k0 = (tile0 + it) * FA_BK
        load((it % 2) * 2 * TILE, k0)
        ks = (it % 2) * 2 * TILE; vs = ks + TILE
        for warp in range(FA_NWARPS):
            L = [W[(warp, l)] for l in range(32)]
            s = [[[0.0]*4 for _ in range(32)] for _ in range(KN)]
            for j in range(KN):
                for kk in range(0, DK - 1, 2):
                    b = ldmatrix(smem, [ks + (8*j + l % 8) * STRIDE + 16*kk + 8*(l//8) for l in range(32)], False)
                    mma(s[j], [L[l]['qf'][kk] for l in range(32)], [b[l][0] for l in range(32)], [b[l][1] for l in range(32)])
                    mma(s[j], [L[l]['qf'][kk+1] for l in range(32)], [b[l][2] for l in range(32)], [b[l][3] for l in range(32)])
                if DK % 2:  # an odd last k-step (D 80): ldmatrix.x2
                    b = ldmatrix(smem, [ks + (8*j + l % 8) * STRIDE + 16*(DK-1) + 8*((l//8) % 2) for l in range(32)], False, 2)
                    mma(s[j], [L[l]['qf'][DK-1] for l in range(32)], [b[l][0] for l in range(32)], [b[l][1] for l in range(32)])
            for l in range(32):
                st = L[l]; t4 = l % 4
                if k0 + FA_BK > all_see or k0 < masked_below:
                    for j in range(KN):
                        for e in range(4):
                            key = k0 + 8*j + 2*t4 + e % 2
                            if key > st['rp'][e//2] or key < st['rf'][e//2]:
                                s[j][l][e] = -np.inf
            # row max across quads
            mn = [[max([L[l]['m'][i]] + [max(s[j][l][2*i], s[j][l][2*i+1]) for j in range(KN)]) for i in range(2)] for l in range(32)]
            for l in range(32):
                for i in range(2):
                    q4 = [mn[(l & ~3) + x][i] for x in range(4)]
                    st = L[l]; new = max(q4)
                    corr = np.exp2(st['m'][i] - finite(new)); st['m'][i] = new; st['l'][i] *= corr
                    for j in range(DN):
                        st['o'][j][2*i] *= corr; st['o'][j][2*i+1] *= corr
            pf = [[[None]*4 for _ in range(32)] for _ in range(KC)]
            for l in range(32):
                st = L[l]
                for c in range(KC):
                    for h in range(2):
                        for i in range(2):
                            sj = s[2*c+h][l]
                            mi = finite(st['m'][i])
                            p = (f16(np.exp2(sj[2*i] - mi)), f16(np.exp2(sj[2*i+1] - mi)))
                            pf[c][l][2*h+i] = p; st['l'][i] += p[0] + p[1]
            for c in range(KC):
                for j in range(0, DN, 2):
                    b = ldmatrix(smem, [vs + (16*c + l % 8 + 8*((l//8) % 2)) * STRIDE + 8*j + 8*(l//16) for l in range(32)], True)
                    for jj, (b0, b1) in [(j, (0, 1)), (j+1, (2, 3))]:
                        oc = [L[l]['o'][jj] for l in range(32)]
                        mma(oc, pf[c], [b[l][b0] for l in range(32)], [b[l][b1] for l in range(32)])
                        for l in range(32):
                            L[l]['o'][jj] = oc[l]
    for warp in range(FA_NWARPS):
        for l in range(32):
            st = W[(warp, l)]; t4 = l % 4
            for i in range(2):
                lt = sum(W[(warp, (l & ~3) + x)]['l'][i] for x in range(4))
                if not st['act'][i]: continue
                for j in range(DN):
                    o = st['at'][i] + 8*j + 2*t4
                    out[o] = st['o'][j][2*i] / lt; out[o+1] = st['o'][j][2*i+1] / lt

def check(n_head, n_kv, D, n_ctx, n_pos, n_q, window=0):
    K = rng.standard_normal((n_kv, n_ctx, D)).astype(np.float16).astype(np.float32)
    V = rng.standard_normal((n_kv, n_ctx, D)).astype(np.float16).astype(np.float32)
    Q = rng.standard_normal((n_q, n_head, D)).astype(np.float32)
    pos = np.arange(n_pos - n_q, n_pos)
    out = np.full(n_q * n_head * D, np.nan)
    G = n_head // n_kv; rows = n_q * G; gx = (rows + FA_BQ - 1) // FA_BQ
    for by in range(n_kv):
        for bx in range(gx):
            kernel(Q.ravel(), K.ravel(), V.ravel(), pos, out, n_q, n_head, n_kv, n_ctx, 1/np.sqrt(D), D, bx, gx, by, window)
    out = out.reshape(n_q, n_head, D)
    worst = 0
    for h in range(n_head):
        g = h // G
        s = Q[:, h] @ K[g, :n_pos].T / np.sqrt(D)
        keys = np.arange(n_pos)[None, :]
        s[keys > pos[:, None]] = -np.inf
        if window > 0:  # the CPU's window: keys pos - window < k
            s[keys <= pos[:, None] - window] = -np.inf
        p = np.exp(s - s.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
        ref = p @ V[g, :n_pos]; mag = p @ np.abs(V[g, :n_pos])
        worst = max(worst, np.nanmax(np.abs(out[:, h] - ref) / mag))
    print((n_head, n_kv, D, n_ctx, n_pos, n_q, window), "nan:", np.isnan(out).sum(), "max rel %.2e" % worst)
    return np.isnan(out).sum() == 0 and worst <= 2e-3


ok = check(6, 2, 64, 160, 77, 37)  # prefix 40, group 3, ragged
ok &= check(2, 1, 128, 200, 150, 70)  # prefix 80, group 2, D 128, 3 tiles
ok &= check(3, 1, 80, 160, 100, 40)  # D 80: an odd number of k-steps, group 3
ok &= check(2, 2, 32, 160, 130, 70)  # D 32: one x4 a key tile
ok &= check(2, 1, 96, 160, 90, 30)  # D 96
# Sliding windows: rows from 0 inside and past a window of 16 (several tiles, a row with no key
# in the first tile); a window of 1; after a prefix, the first tile skipped (tile0 > 0); D 80.
ok &= check(2, 1, 64, 256, 200, 200, 16)
ok &= check(4, 2, 32, 160, 100, 60, 1)
ok &= check(2, 1, 128, 320, 300, 40, 70)
ok &= check(3, 1, 80, 256, 180, 60, 100)
raise SystemExit(0 if ok else 1)
