"""The hand-written Triton helpers every generated ``<module>_triton`` imports (none depends on a
spec): how a chunk's maps are composed and scanned. The look-back family's protocol is in
scangen.kernels.lookback.

``row_tile``, ``lane_positions``, ``grouped_steps``, ``group_starts`` and ``chunk_steps`` index a
program's tile: its rows, its columns' steps, a chunk's steps and mask; ``combine`` and its
variants compose the affine maps of a scan, and ``scan_tiles`` scans a chunk's maps with them (in
either order, over grouped steps, or a run of steps a warp); ``load_row`` loads a per-row input
(or broadcasts its default); ``load_tile`` (``load_raw`` then ``cast_tile``, which the persist
family calls apart) loads an optional input's or a param's tile, or broadcasts its default;
``load_shifted`` and ``shift_tile`` give an input's tile one step later or earlier (template
option ``input_shift="split"``: from its aligned tile in registers, ``shift_next`` /
``shift_prev``, and one load a thread's group of steps); ``flip_groups`` reverses each thread's
group of steps (``scan_order="grouped"``).

The generated kernels call these and keep what each op's spec decides (its loads, maps and
stores); Triton inlines every call, so a helper costs nothing: moving the scan and the
look-back's protocol into helpers left the PTX of every kernel as it was, line for line
(``bench/dev/ptx_digest.py``).
"""
import triton
import triton.language as tl


@triton.jit
def row_tile(tile, R1, R2, BN: tl.constexpr, LANES: tl.constexpr):
    # Row tile `tile`: which of its BN rows exist (row_ok, [BN]) and each row's two indices over
    # the canonical [R1, R2] rows (int64, for the row offsets). LANES (time-major rows a lane,
    # runtime.launch.lanes): the rows' alignment hidden, so that Triton's coalescing gives each
    # lane whole rows, one element a step, and the scan along time runs in registers (LANES == 2
    # also makes the tile's loads volatile, all issued up front: load_tile and the template).
    rows = tile * BN + tl.arange(0, BN)
    if LANES:
        rows = tl.multiple_of(rows, 1)
    return rows < R1 * R2, (rows // R2).to(tl.int64), (rows % R2).to(tl.int64)


@triton.jit
def lane_positions(BT: tl.constexpr, W: tl.constexpr):
    # A chunk's columns (cols, [BT]) and the scan position each holds (pos). W > 1 (lane tiles
    # whose warps split the steps, runtime.launch.lane_warps): Triton gives warp w the columns
    # w, w + W, w + 2W, ..., so column j takes position (j % W) * (BT / W) + j // W: each warp
    # holds a run of consecutive steps, scans it in registers, and the warps join once a chunk
    # (scan_tiles) instead of at every step. W == 1 (and kernels with column gathers, which
    # take a column's neighbour for its step's): the position is the column.
    cols = tl.arange(0, BT)
    if W > 1:
        pos = (cols % W) * (BT // W) + cols // W
    else:
        pos = cols
    return cols, pos


@triton.jit
def grouped_steps(pos, BT: tl.constexpr, G: tl.constexpr):
    # The step (relative to the chunk) at scan position pos in the grouped order (template option
    # scan_order="grouped"): (BT - G) - (pos // G) * G + pos % G, G = SHIFT_G steps a thread:
    # the groups in reverse order, the steps of each group in order, so loads keep their vectors,
    # and scan_tiles' FLIP (each group reversed in registers) puts the chunk in reverse time
    # order, where a forward scan runs the reverse recurrence without the lane reversal of a
    # reverse associative_scan.
    return (BT - G) - (pos // G) * G + pos % G


@triton.jit
def group_starts(BT: tl.constexpr, G: tl.constexpr, GROUPED: tl.constexpr):
    # The first step (relative to the chunk) of each thread's group of G steps ([BT / G]), in the
    # columns' order (GROUPED: grouped_steps'). Inputs read one step away load aligned (16-byte
    # vectors, G steps a thread); their shifted tiles come from those in registers and one
    # strided load a group (load_shifted, shift_tile), whose groups start at these steps.
    if GROUPED:
        g = (BT - G) - tl.arange(0, BT // G) * G
    else:
        g = tl.arange(0, BT // G) * G
    return g


@triton.jit
def chunk_steps(chunk, tcol, row_ok, T, BN: tl.constexpr, BT: tl.constexpr,
                EVEN: tl.constexpr):
    # Chunk `chunk`'s first step t0, the steps left from it (rem: steps are compared as chunk
    # columns against t0 and rem, 32-bit, with no overflow however long T is), each column's
    # step t (64-bit, for the addresses; tcol: each column's step relative to the chunk) and
    # the mask of the tile's elements inside the rows and the window (ok, [BN, BT]). EVEN
    # (every tile full, runtime.even): no mask, which Triton folds away.
    t0 = chunk * BT
    rem = T - t0
    t = t0.to(tl.int64) + tcol
    if EVEN:
        ok = tl.full([BN, BT], 1, tl.int1)
    else:
        ok = row_ok[:, None] & (tcol < rem)[None, :]
    return t0, rem, t, ok


@triton.jit
def load_row(ptr, base, row_ok, default, BN: tl.constexpr, HAS: tl.constexpr, ACC: tl.constexpr):
    # A per-row input's value for each of a tile's rows ([BN], ACC); where the call leaves the
    # input out (HAS false) its default.
    if HAS:
        x = tl.load(ptr + base, mask=row_ok, other=0).to(ACC)
    else:
        x = tl.zeros([BN], dtype=ACC) + default
    return x


@triton.jit
def combine(a_prev, b_prev, a_cur, b_cur):
    # Composes two affine maps A -> a + b * A; `prev` is the element nearer to the carry in
    # scan order (the later step in a reverse scan), so one combine serves both directions.
    return a_cur + b_cur * a_prev, b_cur * b_prev


@triton.jit
def flip_groups(x, BN: tl.constexpr, BT: tl.constexpr, G: tl.constexpr):
    # Reverses every group of G consecutive columns of a [BN, BT] tile. The groups are the
    # steps each thread holds (SHIFT_G), so this moves registers only, no data between threads.
    if G == 1:  # nothing to reverse; the reshapes could still convert the tile's layout
        return x
    return tl.reshape(tl.flip(tl.reshape(x, (BN, BT // G, G)), 2), (BN, BT))


@triton.jit
def combine_excl(a_prev, b_prev, ea_prev, eb_prev, a_cur, b_cur, ea_cur, eb_cur):
    # Carries, beside the composed map (a, b), the map (ea, eb) of the same segment without its
    # element farthest from the carry: the scan then yields, at every step, both the state and
    # its neighbour nearer the carry (next(A) in a reverse scan), with no shift across threads.
    return a_cur + b_cur * a_prev, b_cur * b_prev, ea_cur + eb_cur * a_prev, eb_cur * b_prev


@triton.jit
def combine_joint(p0, q0, r0, u0, v0, p1, q1, r1, u1, v1):
    # Composes two maps x -> [[p, q], [0, r]] x + (u, v) of a joint scan (plan.JointPlan), the
    # element `0` nearer to the carry applied first, as in combine.
    return p1 * p0, p1 * q0 + q1 * r0, r1 * r0, p1 * u0 + q1 * v0 + u1, r1 * v0 + v1


@triton.jit
def scan_along(x, AXIS: tl.constexpr, REV: tl.constexpr):
    # tl.associative_scan of the maps in tuple `x` along AXIS with the combine of their arity:
    # (a, b) combine, (a, b, ea, eb) combine_excl, (p, q, r, u, v) combine_joint. Triton takes no
    # combine function as an argument of a helper, so the arity picks it. (`x` may be a list:
    # what a comprehension gives under TRITON_INTERPRET, which associative_scan refuses.)
    if len(x) == 2:
        y = tl.associative_scan((x[0], x[1]), AXIS, combine, reverse=REV)
    elif len(x) == 4:
        y = tl.associative_scan((x[0], x[1], x[2], x[3]), AXIS, combine_excl, reverse=REV)
    else:
        tl.static_assert(len(x) == 5)
        y = tl.associative_scan((x[0], x[1], x[2], x[3], x[4]), AXIS, combine_joint, reverse=REV)
    return y


@triton.jit
def compose(x, y):
    # The maps of tuple `y` composed after those of `x` (x nearer to the carry), as scan_along's
    # combine of the same arity.
    if len(x) == 2:
        z = combine(x[0], x[1], y[0], y[1])
    elif len(x) == 4:
        z = combine_excl(x[0], x[1], x[2], x[3], y[0], y[1], y[2], y[3])
    else:
        z = combine_joint(x[0], x[1], x[2], x[3], x[4], y[0], y[1], y[2], y[3], y[4])
    return z


@triton.jit
def scan_tiles(x, BN: tl.constexpr, BT: tl.constexpr, G: tl.constexpr, W: tl.constexpr,
               FLIP: tl.constexpr, REV: tl.constexpr):
    # The scan of one chunk: the maps of tuple `x` ([BN, BT] tiles, see scan_along) composed
    # along the steps, each step's map with all before it in scan order (REV: from the last
    # column). FLIP (template option scan_order="grouped"): the columns hold each thread's
    # group of G steps in order and the groups in reverse, so the groups are flipped in
    # registers, scanned forward and flipped back: no lane reversal. W > 1 (runtime.launch.
    # lane_warps): column j holds scan position (j % W) * (BT / W) + j // W, so each of the W
    # warps holds a run of BT / W consecutive steps; each run is scanned in its warp's
    # registers, the runs' composed maps across the warps, and each run composed with the runs
    # before it in scan order: the warps join once a chunk instead of at every step.
    if W > 1:
        tl.static_assert(G == 1)  # runs of steps in column order: no groups to flip
        S: tl.constexpr = BT // W  # the steps of a run
        run = tl.arange(0, W)[None, :]  # [1, W]
        r = scan_along([tl.reshape(v, (BN, S, W)) for v in x], 1, REV)
        far = (tl.arange(0, S) == (0 if REV else S - 1))[None, :, None]  # a run's far end
        w = scan_along([tl.sum(tl.where(far, v, 0.0), axis=1) for v in r], 1, REV)  # [BN, W]
        if REV:
            src = tl.broadcast_to(tl.minimum(run + 1, W - 1), (BN, W))
        else:
            src = tl.broadcast_to(tl.maximum(run - 1, 0), (BN, W))
        c = compose([tl.gather(v, src, 1)[:, None, :] for v in w], r)  # after the runs before
        first = (run == (W - 1 if REV else 0))[:, None, :]  # the run nearest the carry
        y = [tl.reshape(tl.where(first, r[i], c[i]), (BN, BT)) for i in (0, 1, 2, 3, 4)[:len(x)]]
    elif FLIP:
        y = scan_along([flip_groups(v, BN, BT, G) for v in x], 1, False)
        y = [flip_groups(v, BN, BT, G) for v in y]  # back to the columns' order
    else:
        y = scan_along(x, 1, REV)
    return y


@triton.jit
def shift_next(x, e, M: tl.constexpr, G: tl.constexpr):
    # x: [M, G] groups of G steps, each held by one thread; e: [M] the step after each group.
    # Returns x one step later ([M, G]), in registers: the odd steps shifted are the even
    # ones, and the even steps shifted are the odd ones moved by one within the group.
    if G == 1:
        r = tl.reshape(e, (M, 1))
    else:
        ev, od = tl.split(tl.reshape(x, (M, G // 2, 2)))
        r = tl.reshape(tl.join(od, shift_next(ev, e, M, G // 2)), (M, G))
    return r


@triton.jit
def shift_prev(x, e, M: tl.constexpr, G: tl.constexpr):
    # As shift_next, one step earlier; e: [M] the step before each group.
    if G == 1:
        r = tl.reshape(e, (M, 1))
    else:
        ev, od = tl.split(tl.reshape(x, (M, G // 2, 2)))
        r = tl.reshape(tl.join(shift_prev(od, e, M, G // 2), ev), (M, G))
    return r


@triton.jit
def load_shifted(ptr, base, st, t_shift, g, ok, row_ok, T, NEXT: tl.constexpr, G: tl.constexpr,
                 LANES: tl.constexpr, HAS: tl.constexpr):
    # The raw tile shift_tile needs for an input one step later (NEXT) or earlier than the
    # chunk's steps (template option input_shift="split"). One step a thread (G == 1): the plain
    # load at the shifted steps t_shift ([BN, BT]). Groups of G steps a thread, whose aligned
    # tile loads as 16-byte vectors: only the step beyond each group ([BN, BT / G], one strided
    # load a group, g: each group's first step); the rest of the shift comes from registers.
    # Without the input (HAS false: an optional input left out) load_raw's 0 that stands for it.
    if G == 1 or not HAS:
        r = load_raw(ptr, base, t_shift, st, ok, HAS, LANES)
    else:
        if NEXT:
            te = g + G  # the step after each group
            inside = te < T
        else:
            te = g - 1  # the step before each group
            inside = te >= 0
        r = tl.load(ptr + base[:, None] + te[None, :] * st,
                    mask=row_ok[:, None] & inside[None, :], other=1)
    return r


@triton.jit
def shift_tile(x, raw, shifted_raw, tcol, edge, BN: tl.constexpr, BT: tl.constexpr,
               G: tl.constexpr, NEXT: tl.constexpr, HAS: tl.constexpr):
    # Tile x ([BN, BT], cast from its aligned load raw) one step later (NEXT) or earlier, from
    # load_shifted's shifted_raw: that load itself with one step a thread (G == 1); with groups
    # of G steps a thread, raw's steps moved within each thread's group in registers
    # (shift_next / shift_prev) and shifted_raw's step beyond the group; in the column of the
    # row's edge (tcol == edge: its last step for NEXT, its first else) x itself, as the plain
    # load's clamped steps give. Without the input (HAS false) x, its default broadcast
    # (cast_tile), which every step shares.
    if not HAS:
        y = x
    elif G == 1:
        y = shifted_raw.to(x.dtype)
    else:
        M: tl.constexpr = BN * BT // G
        if NEXT:
            s = shift_next(tl.reshape(raw, (M, G)), tl.reshape(shifted_raw, (M,)), M, G)
        else:
            s = shift_prev(tl.reshape(raw, (M, G)), tl.reshape(shifted_raw, (M,)), M, G)
        y = tl.where((tcol == edge)[None, :], x, tl.reshape(s, (BN, BT)).to(x.dtype))
    return y


@triton.jit
def load_raw(ptr, base, t, st, ok, HAS: tl.constexpr, LANES: tl.constexpr):
    # The [BN, BT] tile of an input or a param at steps t as stored (cast_tile casts it); where
    # the call has no such tensor (HAS false: an optional input left out, a param given as a
    # float) a 0 that stands for it, which the persist family's loop carries for nothing (a
    # constant). LANES == 2: the load volatile (runtime.launch.lanes).
    if HAS:
        x = tl.load(ptr + base[:, None] + t[None, :] * st, mask=ok, other=1, volatile=LANES == 2)
    else:
        x = 0
    return x


@triton.jit
def cast_tile(raw, zero, default, HAS: tl.constexpr):
    # load_raw's tile in zero's dtype (the kernel's ACC), or, without the tensor (HAS false), the
    # default, broadcast.
    if HAS:
        x = raw.to(zero.dtype)
    else:
        x = zero + default
    return x


@triton.jit
def load_tile(ptr, base, t, st, ok, zero, default, HAS: tl.constexpr, LANES: tl.constexpr):
    # The [BN, BT] tile of an input or a param at steps t, in zero's dtype (the kernel's ACC);
    # where the call has no such tensor (HAS false: an optional input left out, a param given
    # as a float) the default, broadcast. LANES == 2: the load volatile (runtime.launch.lanes).
    return cast_tile(load_raw(ptr, base, t, st, ok, HAS, LANES), zero, default, HAS)
