//! The plan's answers for matrix products: how activations are quantized, which kernel takes
//! a product of a given shape (mat-vec, tensor-core mat-vecs, int8 or f16 GEMM), its tile,
//! split and summation order.

use super::*;

/// Guessed relative speed of a full SM on each tile shape of [`MMQ_TILES`] (larger tiles
/// reuse each loaded fragment more); to be replaced by the H200 figures of
/// `cuda-parity --time`.
const TILE_SPEED: [f64; TILES] = [1.0, 0.85, 0.75, 0.75];

impl Plan {
    /// The f32 GEMM's warps along the tokens a block for `n` tokens (`gemm_f32.cu`; its warps
    /// share the tokens' and the weight's rows through L1): 4
    /// (`FERROLM_GEMM_F32_TOKEN_WARPS`), fewer where `n` does not fill them. Each warp's walk
    /// is the same whatever the layout, so the same bits (the CPU's). A 2048-token prefill's
    /// router (qwen3-30b-a3b: 128 × 2048) read about 390 MB from L2 a layer with one.
    pub fn gemm_f32_token_warps(&self, n: usize) -> usize {
        self.switches
            .gemm_f32_token_warps
            .unwrap_or(4)
            .min(n.div_ceil(8))
            .max(1)
    }

    /// How activations meeting `ty` weights of `cols` columns are quantized: as llama.cpp's
    /// CPU pairs them, Q8_K for K-quants (rows of whole 256-blocks), Q8_1 otherwise.
    pub fn act_quant(&self, ty: GgmlType, cols: usize) -> ActQuant {
        let k_quant = matches!(
            ty,
            GgmlType::Q2K | GgmlType::Q3K | GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K
        );
        if k_quant && cols.is_multiple_of(256) && self.switches.q8k {
            ActQuant::Q8K
        } else {
            ActQuant::Q8_1
        }
    }

    /// The product of `n` activation rows with `ty` weights of `rows` × `cols`: in a pass of
    /// several sequences, the tensor-core mat-vec for 2-64 rows where the format has it
    /// ([`Plan::mma_matvec`]); else mat-vec up to [`DECODE_MAX_ROWS`] rows, the GEMM above
    /// where the format and width have one, mat-vec slices otherwise.
    pub fn matmul(&self, ty: GgmlType, rows: usize, cols: usize, n: usize) -> Matmul {
        let wide = self.matvec_wide(ty);
        if ty == GgmlType::F32 {
            Matmul::Float
        } else if let Some((order, splits)) = self.staged_matvec(ty, rows, cols, n) {
            Matmul::MatVecStaged { order, splits }
        } else if let Some(two_tiles) = self.mma_matvec(ty, cols, n) {
            Matmul::MatVecMma { two_tiles }
        } else if n <= DECODE_MAX_ROWS {
            Matmul::MatVec { wide }
        } else if self.switches.mmq && Mmq::supports(ty, cols) {
            Matmul::Gemm(self.gemm(ty, rows, cols, n))
        } else {
            Matmul::MatVecSlices { wide }
        }
    }

    /// Whether `n` rows of a `ty` product of `rows` × `cols` take the f16 warpgroup-MMA GEMM
    /// (`FERROLM_GEMM_F16`, Hopper): ubatches of [`F16_GEMM_MIN_ROWS`] rows or more, held to
    /// its contract (`ops/gemm_wgmma/`), for formats with an f16 expansion. In a pass of
    /// several sequences only past [`BATCH_GRAPH_MAX`] rows: a decode step of up to that many
    /// sequences (padded to a power of two) would expand every weight, the output's too, each
    /// step. A forced CPU order (`FERROLM_CUDA_INT_SCALES=1`) stays forced.
    pub fn f16_gemm(&self, ty: GgmlType, rows: usize, cols: usize, n: usize) -> bool {
        let min = if self.sequence_batches {
            BATCH_GRAPH_MAX + 1
        } else {
            F16_GEMM_MIN_ROWS
        };
        self.switches.gemm_f16
            && self.device.f16_gemm
            && self.switches.int_scales != Some(true)
            && n >= min
            && GemmWgmma::supports(ty, rows, cols)
    }

    /// Whether `n` rows of a batched decode step's `ty` product of `rows` × `cols` take the
    /// f16 GEMM with the weight unpacked in it (`FERROLM_F16_DECODE`, Hopper; `matmul_decode`),
    /// and if so the k shares it is split in: Q4_K ([`GemmWgmma::decodes`]), at
    /// [`F16_DECODE_MIN_ROWS`] (`FERROLM_F16_DECODE_ROWS`) to [`F16_DECODE_MAX_ROWS`] rows (one
    /// token tile, one consumer warpgroup), so each weight is read and unpacked once. The
    /// tiles of so few tokens leave most SMs idle, so k is shared out over them
    /// ([`split_ways`], in super-blocks; `FERROLM_MMQ_SPLIT_K=0`: unsplit), and the product
    /// takes the GEMM only where a share keeps [`F16_DECODE_MIN_SHARE_BLOCKS`] super-blocks
    /// (`FERROLM_F16_DECODE_SHARE_BLOCKS`; a block's start costs what a few super-blocks take). `FERROLM_F16_DECODE_SPLITS`
    /// forces the shares, and the GEMM with them. Contract: the f16 GEMM's, the shares added
    /// in a fixed order.
    /// It comes ahead of the f16 mat-vec (and so of the staged one); with
    /// `FERROLM_F16_DECODE_FIRST=0`, after both.
    pub fn f16_decode(&self, ty: GgmlType, rows: usize, cols: usize, n: usize) -> Option<usize> {
        let behind = !self.switches.f16_decode_first
            && (self.staged_matvec(ty, rows, cols, n).is_some()
                || self.f16_matvec(ty, rows, cols, n).is_some());
        if behind {
            return None;
        }
        self.f16_decode_shares(ty, rows, cols, n)
    }

    /// The k shares of two products of one shape (gate and up), each of which
    /// [`Self::f16_decode`] takes, in one launch of that GEMM (`FERROLM_F16_DECODE_PAIR=1`):
    /// split as their tiles together say (qwen3-8b's 64-row gate and up: 96 tiles, unsplit,
    /// where each alone is 48 tiles split in two). Each output the bits of its own launch
    /// split the same ways.
    pub fn f16_decode_pair(
        &self,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        n: usize,
    ) -> Option<usize> {
        if !self.switches.f16_decode_pair || self.f16_decode(ty, rows, cols, n).is_none() {
            return None;
        }
        // Both matrices' tiles: each rounds its rows up to whole tiles.
        let tile_rows = rows.next_multiple_of(GemmWgmma::TILE_ROWS);
        self.f16_decode_shares(ty, 2 * tile_rows, cols, n)
    }

    /// Whether the f16 decode GEMM ([`Self::f16_decode`]) runs as its deep variant, three
    /// super-blocks of weights in flight an SM (`FERROLM_F16_DECODE_DEEP=1`); the same bits.
    pub fn f16_decode_deep(&self) -> bool {
        self.switches.f16_decode_deep
    }

    /// Whether the f16 decode GEMM takes this product ahead of the mat-vecs
    /// (`FERROLM_F16_DECODE_FIRST`, on by default).
    fn f16_decode_ahead(&self, ty: GgmlType, rows: usize, cols: usize, n: usize) -> bool {
        self.switches.f16_decode_first && self.f16_decode_shares(ty, rows, cols, n).is_some()
    }

    /// [`Plan::f16_decode`]'s rule, whatever comes ahead of it.
    fn f16_decode_shares(&self, ty: GgmlType, rows: usize, cols: usize, n: usize) -> Option<usize> {
        let min = self.switches.f16_decode_rows.unwrap_or(F16_DECODE_MIN_ROWS);
        let take = self.sequence_batches
            && self.switches.f16_decode
            && self.switches.gemm_f16
            && self.switches.gemm_f16_unpack
            && self.device.f16_gemm
            && self.switches.int_scales != Some(true)
            && GemmWgmma::decodes(ty, cols)
            && GemmWgmma::supports(ty, rows, cols)
            && (min..=F16_DECODE_MAX_ROWS).contains(&n);
        if !take {
            return None;
        }
        let blocks = cols / 256;
        let may_split = if self.switches.split_k { blocks } else { 0 };
        if let Some(ways) = self.switches.f16_decode_splits {
            return Some(if may_split > 0 { ways.min(blocks) } else { 1 });
        }
        let tiles = rows.div_ceil(GemmWgmma::TILE_ROWS);
        let ways = split_ways(tiles, self.device.sms, may_split);
        let min_share = self
            .switches
            .f16_decode_share_blocks
            .unwrap_or(F16_DECODE_MIN_SHARE_BLOCKS);
        (blocks.div_ceil(ways) >= min_share).then_some(ways)
    }

    /// Whether an op whose output (`n` rows of `cols`) feeds products keeps an f16 copy of it
    /// beside the f32 one (`CudaAct::f16`: a batched step's norms and SwiGLU write it in their
    /// launch, where `round_f16` took one of its own before the products): where a Q4_K or Q6_K
    /// product of those activations takes the f16 path (its rows taken as `cols`, as the
    /// square attention products have them; the rule does not turn on them elsewhere).
    /// `FERROLM_F16_COPY=0` rounds in the product's launch as before; the same bits either way.
    pub fn f16_copy(&self, cols: usize, n: usize) -> bool {
        self.switches.f16_copy
            && [GgmlType::Q4K, GgmlType::Q6K].iter().any(|&ty| {
                self.f16_gemm(ty, cols, cols, n)
                    || self.f16_matvec(ty, cols, cols, n).is_some()
                    || self.f16_decode(ty, cols, cols, n).is_some()
            })
    }

    /// Whether the f16 mat-vec reads `ty` weights through shared memory (16-byte `cp.async`
    /// chunks of each row's block) rather than straight into a lane's registers, where their
    /// layout allows (`MatVecF16::matmul`): Q6_K unless `FERROLM_F16_MATVEC_Q6K_STAGE=0`, Q4_K
    /// only with `FERROLM_F16_MATVEC_Q4K_STAGE=1`. The same bits either way.
    pub fn f16_matvec_stage(&self, ty: GgmlType) -> bool {
        match ty {
            GgmlType::Q6K => self.switches.f16_matvec_q6k_stage,
            GgmlType::Q4K => self.switches.f16_matvec_q4k_stage,
            _ => false,
        }
    }

    /// Whether a split f16 mat-vec adds its shares in a thread-block cluster a row block
    /// (`FERROLM_F16_MATVEC_CLUSTER`, on; `=0` through the scratch; Hopper, and shares the
    /// kernel's cluster takes: [`MatVecF16::cluster_sums`]). The same bits.
    pub fn f16_matvec_cluster(&self) -> bool {
        self.switches.f16_matvec_cluster && self.device.cc.0 >= 9
    }

    /// Whether consecutive products of one format and width on the f16 mat-vec share a launch
    /// (`FERROLM_F16_MATVEC_ONE`, on: a batched step's q, k and v; `MatVecF16::matmul_many`).
    pub fn f16_matvec_together(&self) -> bool {
        self.switches.f16_matvec_one
    }

    /// How the f16 mat-vec runs a `ty` product: [`Self::f16_matvec_stage`] and
    /// [`Self::f16_matvec_cluster`].
    pub fn f16_matvec_how(&self, ty: GgmlType) -> crate::ops::MatVecF16How {
        crate::ops::MatVecF16How {
            stage_weights: self.f16_matvec_stage(ty),
            cluster_sum: self.f16_matvec_cluster(),
        }
    }

    /// Whether `n` rows of a batched decode step's `ty` product of `rows` × `cols` take the f16
    /// mat-vec (`FERROLM_F16_MATVEC`, on by default; Hopper, where the f16 path rounds the
    /// activations), and if so in how many k shares: passes of several sequences, Q4_K and
    /// Q6_K ([`MatVecF16::supports`]), [`F16_MATVEC_DEFAULT_ROWS`] rows (rows of
    /// [`F16_MATVEC_WIDE_COLS`] elements or more, else [`F16_MATVEC_NARROW_ROWS`]; or
    /// `FERROLM_F16_MATVEC_ROWS` for all) to [`F16_MATVEC_MAX_ROWS`]. k is shared out over the
    /// SMs its row blocks leave idle, twice over ([`split_ways`]; `FERROLM_MMQ_SPLIT_K=0`:
    /// unsplit), or as `FERROLM_F16_MATVEC_SPLITS` says; never past the kernel's
    /// [`F16_MATVEC_SPLIT_BLOCKS`] row blocks. Contract: the f16 GEMM's, the shares added in a
    /// fixed order. Ahead of the staged and tensor-core mat-vecs; behind the f16 decode GEMM
    /// unless `FERROLM_F16_DECODE_FIRST=0`.
    pub fn f16_matvec(&self, ty: GgmlType, rows: usize, cols: usize, n: usize) -> Option<usize> {
        let min = self
            .switches
            .f16_matvec_rows
            .unwrap_or(if cols >= F16_MATVEC_WIDE_COLS {
                F16_MATVEC_DEFAULT_ROWS
            } else {
                F16_MATVEC_NARROW_ROWS
            });
        let take = self.sequence_batches
            && !self.f16_decode_ahead(ty, rows, cols, n)
            && self.switches.f16_matvec
            && self.switches.gemm_f16
            && self.device.f16_gemm
            && (min.max(1)..=F16_MATVEC_MAX_ROWS).contains(&n)
            && MatVecF16::supports(ty, cols);
        if !take {
            return None;
        }
        let blocks = cols / 256;
        let row_blocks = MatVecF16::row_blocks(rows);
        let may_split = if self.switches.split_k && row_blocks <= F16_MATVEC_SPLIT_BLOCKS {
            blocks
        } else {
            0
        };
        // The blocks an SM holds at once: two by default; the format's own count (Q6_K's
        // eight-warp blocks one) with FERROLM_F16_MATVEC_OCCUPANCY=1.
        let per_sm = if self.switches.f16_matvec_occupancy {
            MatVecF16::blocks_per_sm(ty)
        } else {
            2
        };
        Some(match self.switches.f16_matvec_splits {
            Some(w) if may_split > 0 => w.min(blocks),
            Some(_) => 1,
            None => split_ways(row_blocks, per_sm * self.device.sms, may_split),
        })
    }

    /// Whether `n` rows of a batched decode step's `ty` product of `rows` × `cols` take the
    /// staged tensor-core mat-vec (`FERROLM_MMVQ_MMA_STAGED`, off by default until measured), and
    /// if so in which order and how many k shares: passes of several sequences,
    /// [`STAGED_DEFAULT_ROWS`] (`FERROLM_MMVQ_MMA_STAGED_ROWS`) to [`STAGED_MAX_ROWS`] rows. The
    /// order is the pass's GEMM order: per sub-block, or the integer-scale block order where
    /// [`Plan::integer_scales`] says so (`FERROLM_CUDA_INT_SCALES=1` in a batched pass). k is
    /// shared out over the SMs its row blocks leave idle, twice over ([`split_ways`];
    /// `FERROLM_MMQ_SPLIT_K=0`: unsplit), or as `FERROLM_MMVQ_MMA_STAGED_SPLITS` says; never past
    /// the kernel's [`STAGED_SPLIT_BLOCKS`] row blocks. Contract: mmq's arithmetic in that
    /// order, the shares added in a fixed order.
    pub fn staged_matvec(
        &self,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        n: usize,
    ) -> Option<(MmqOrder, usize)> {
        let min = self.switches.mma_staged_rows.unwrap_or(STAGED_DEFAULT_ROWS);
        let blocks_order =
            self.integer_scales(ty, cols, n) && MmvqStaged::supports(ty, cols, MmqOrder::Blocks);
        let order = if blocks_order {
            MmqOrder::Blocks
        } else {
            MmqOrder::Subs
        };
        let take = self.sequence_batches
            && !self.f16_decode_ahead(ty, rows, cols, n)
            && self.f16_matvec(ty, rows, cols, n).is_none()
            && self.switches.mma_staged
            && (min.max(STAGED_MIN_ROWS)..=STAGED_MAX_ROWS).contains(&n)
            && MmvqStaged::supports(ty, cols, order);
        if !take {
            return None;
        }
        let blocks = cols / 256;
        let row_blocks = MmvqStaged::row_blocks(rows);
        // Past the kernel's counters a product stays unsplit (split_ways says so too).
        let may_split = if self.switches.split_k && row_blocks <= STAGED_SPLIT_BLOCKS {
            blocks
        } else {
            0
        };
        let ways = match self.switches.mma_staged_splits {
            Some(w) if may_split > 0 => w.min(blocks),
            Some(_) => 1,
            None => split_ways(row_blocks, 2 * self.device.sms, may_split),
        };
        Some((order, ways))
    }

    /// Whether `n` rows of a `ty` product over `cols` take the tensor-core mat-vec
    /// (`FERROLM_MMVQ_MMA`), and if so whether a warp takes two 16-row tiles: passes of several
    /// sequences only (its contract is the tensor-core one; a single sequence's decode keeps
    /// mmvq's bits), 2 to [`MMA_MV_MAX_ROWS`] rows. Two tiles wherever the kernel has them
    /// ([`MmvqMma::has_two_tiles`]: 33 rows or more, where each activation load then serves
    /// twice the weights), unless `FERROLM_MMVQ_MMA_TILES=1`.
    pub fn mma_matvec(&self, ty: GgmlType, cols: usize, n: usize) -> Option<bool> {
        let take = self.sequence_batches
            && self.switches.mma_matvec
            && (2..=MMA_MV_MAX_ROWS).contains(&n)
            && MmvqMma::supports(ty, cols);
        take.then(|| self.switches.mma_row_tiles != Some(1) && MmvqMma::has_two_tiles(n))
    }

    /// Whether mat-vecs of `ty` take the wide (warp-per-row) kernels.
    pub fn matvec_wide(&self, ty: GgmlType) -> bool {
        self.switches.mmvq_wide && Mmvq::has_wide(ty)
    }

    /// The GEMM of `n` rows with `ty` weights of `rows` × `cols` (a shape [`Mmq::supports`]):
    /// the CUDA-core kernel for widths that are not whole k-steps and short ubatches of the
    /// eight-lane formats ([`Plan::lanes`]), the tensor-core tiles otherwise.
    pub fn gemm(&self, ty: GgmlType, rows: usize, cols: usize, n: usize) -> Gemm {
        // Rows of a partial last k step keep the CPU's kernel where the CPU's bits are owed.
        let tail = !cols.is_multiple_of(crate::ops::MMQ_BK);
        if !Mmq::tiles_take(ty, cols)
            || self.lanes(ty, n)
            || (tail && !self.tensor_core_contract(n))
        {
            Gemm::Small
        } else {
            let tile = self.tile(ty, rows, cols, n);
            Gemm::Tiles {
                tile,
                launches: self.dense_order(ty, cols, n),
                splits: self.k_splits(ty, tile, rows, cols, n),
            }
        }
    }

    /// The k steps a `ty` GEMM of `n` rows over `cols` columns may split (0: none): under
    /// `FERROLM_MMQ_SPLIT_K`, where it sums in the per-sub-block order and is held to the
    /// tensor-core contract (within f32 rounding of the CPU) rather than to the CPU's bits:
    /// passes of several sequences ([`Plan::for_sequence_batches`]) and ubatches of
    /// [`CPU_ORDER_MAX_ROWS`] rows or more.
    fn split_steps(&self, ty: GgmlType, cols: usize, n: usize) -> usize {
        let contract = self.tensor_core_contract(n);
        if self.switches.split_k && contract && !self.integer_scales(ty, cols, n) {
            Mmq::k_steps(cols)
        } else {
            0
        }
    }

    /// Whether a GEMM of `n` rows is held to the tensor-core contract (within f32 rounding of
    /// the CPU) rather than to the CPU's bits: passes of several sequences
    /// ([`Plan::for_sequence_batches`]) and ubatches of [`CPU_ORDER_MAX_ROWS`] rows or more.
    fn tensor_core_contract(&self, n: usize) -> bool {
        self.sequence_batches || n >= CPU_ORDER_MAX_ROWS
    }

    /// The split-K ways of a `ty` GEMM over `rows` × `n` on `tile` ([`split_ways`]): where
    /// its tiles leave slots idle (a batched decode step's 9-64 rows give one column of tiles:
    /// qwen3-8b's 4096-row matrices 32 blocks on 132 SMs), shares in the idle slots; 1 where
    /// the tiles alone fill the GPU or [`Plan::split_steps`] says no.
    pub fn k_splits(&self, ty: GgmlType, tile: usize, rows: usize, cols: usize, n: usize) -> usize {
        let t = MMQ_TILES[tile];
        let slots = self.device.sms * self.blocks_per_sm(ty)[tile] as usize;
        let tiles = rows.div_ceil(t.bm) * n.div_ceil(t.bn);
        split_ways(tiles, slots, self.split_steps(ty, cols, n))
    }

    /// Blocks of each tile shape of `ty` one SM holds (0: none fit, or no GEMM for `ty`).
    fn blocks_per_sm(&self, ty: GgmlType) -> [u32; TILES] {
        self.device
            .mmq_blocks_per_sm
            .iter()
            .find(|(t, _)| *t == ty)
            .map_or([0; TILES], |(_, b)| *b)
    }

    /// Whether `n` activation rows of `ty` weights take the eight-lane kernel although the
    /// tensor-core tiles could: ubatches under [`LANES_MAX_TOKENS`] of the formats the CPU sums
    /// in eight lanes (Q8_0, Q5_0: `lanes` of the formats table), unless
    /// `FERROLM_CUDA_Q8_0_LANES=0`.
    pub fn lanes(&self, ty: GgmlType, n: usize) -> bool {
        formats::has(ty, |f| f.lanes) && self.switches.q8_0_lanes && n < LANES_MAX_TOKENS
    }

    /// The tile (index in [`MMQ_TILES`]) of a `ty` GEMM over `rows` × `n` with `cols`
    /// columns: `FERROLM_MMQ_TILE`, or [`auto_tile`] on this device. A pass of several
    /// sequences weighs the tiles with their split-K ways; a long prompt's ubatch keeps the
    /// choice measured without them (its splits come after: pp512 and pp2048 of qwen3-8b rose
    /// 3% with them, docs/perf.md).
    pub fn tile(&self, ty: GgmlType, rows: usize, cols: usize, n: usize) -> usize {
        let fits = self.blocks_per_sm(ty);
        let steps = if self.sequence_batches {
            self.split_steps(ty, cols, n)
        } else {
            0
        };
        self.switches
            .mmq_tile
            .unwrap_or_else(|| auto_tile(rows, n, steps, self.device.sms, |i| fits[i]))
    }

    /// Whether `ty` weights of `cols` columns take the CPU's integer-scale order in a GEMM of
    /// an `n`-row ubatch: Q4_K with Q8_K activations (one scale per block, which that order
    /// needs) under [`CPU_ORDER_MAX_ROWS`] rows. The order costs 10% of a long prompt (a second
    /// accumulator and the exact pair sums), so long ubatches take the per-sub-block order.
    /// `FERROLM_CUDA_INT_SCALES=0` or `=1` forces either.
    pub fn integer_scales(&self, ty: GgmlType, cols: usize, n: usize) -> bool {
        self.switches.int_scales.unwrap_or(n < CPU_ORDER_MAX_ROWS)
            && ty == GgmlType::Q4K
            && self.act_quant(ty, cols) == ActQuant::Q8K
    }

    /// The launches of a dense `n`-token GEMM as (first token, tokens, order), as the CPU's
    /// dense matmul orders them (`ferrolm_cpu::matmul::Order::Dense`): pairs for the first
    /// `n - n % 4` tokens when `n >= 4`, blocks for the rest.
    pub fn dense_order(
        &self,
        ty: GgmlType,
        cols: usize,
        n: usize,
    ) -> Vec<(usize, usize, MmqOrder)> {
        if !self.integer_scales(ty, cols, n) {
            return vec![(0, n, MmqOrder::Subs)];
        }
        let pairs = if n >= 4 { n - n % 4 } else { 0 };
        [
            (0, pairs, MmqOrder::Pairs),
            (pairs, n - pairs, MmqOrder::Blocks),
        ]
        .into_iter()
        .filter(|&(_, len, _)| len > 0)
        .collect()
    }
}

/// The split-K ways of a GEMM of `tiles` tiles with `slots` block slots on the GPU and
/// `steps` k steps it may split (0: none): as many shares as the idle slots take, each at
/// least [`SPLIT_MIN_STEPS`] steps, at most [`MMQ_MAX_SPLITS`], none empty; 1 where the tiles
/// alone fill half the slots or more.
pub fn split_ways(tiles: usize, slots: usize, steps: usize) -> usize {
    if tiles == 0 || tiles > MMQ_SPLIT_TILES {
        return 1;
    }
    let ways = (slots / tiles)
        .min(steps / SPLIT_MIN_STEPS)
        .min(MMQ_MAX_SPLITS);
    if ways < 2 {
        return 1;
    }
    // The steps a share rounded up, then the shares that takes.
    steps.div_ceil(steps.div_ceil(ways))
}

/// The tile for `rows` × `n` on `sms` multiprocessors, given how many blocks of each tile fit
/// one (0: the tile does not fit this device) and the k steps split-K may share out (0: none):
/// the best guessed speed times the share of the GPU's slot time that does work (the last
/// wave's idle slots, and a share's steps rounded up) and the share of the tiles' columns
/// that are tokens. Small GEMMs get small tiles so that every SM has work; a batched decode
/// step's 9-32 rows get the 32-column tile, split over the slots its tiles leave idle, rather
/// than a 128-column one three quarters empty.
pub fn auto_tile(
    rows: usize,
    n: usize,
    steps: usize,
    sms: usize,
    blocks_per_sm: impl Fn(usize) -> u32,
) -> usize {
    let mut best = (0.0, MMQ_TILES.len() - 1);
    for (i, t) in MMQ_TILES.iter().enumerate() {
        let slots = sms * blocks_per_sm(i) as usize;
        if slots == 0 {
            continue;
        }
        let tiles = rows.div_ceil(t.bm) * n.div_ceil(t.bn);
        let ways = split_ways(tiles, slots, steps);
        let (blocks, k) = (tiles * ways, steps.max(1));
        let slot_time = blocks.div_ceil(slots) * slots * k.div_ceil(ways);
        let busy = (tiles * k) as f64 / slot_time as f64;
        let used = n as f64 / (n.div_ceil(t.bn) * t.bn).max(1) as f64;
        let score = busy * used * TILE_SPEED[i];
        if score > best.0 {
            best = (score, i);
        }
    }
    best.1
}
