"""The hand-written Triton helpers every generated ``<module>_triton`` imports (none depends on a
spec).

``combine`` and its variants compose the affine maps of a scan; ``shift_next`` / ``shift_prev``
shift a tile by one step in registers (template option ``input_shift="split"``);
``flip_groups`` reverses each thread's group of steps (``scan_order="grouped"``); ``lookback``
and ``lookback_joint`` pass carries between the programs of one row (the look-back family,
scangen.runtime.config), over a workspace of words written once (scangen.runtime.workspace);
``lookback_rows`` and ``lookback_joint_rows`` do the same for a tile of rows at once (time-major
buffers, whose rows are adjacent in memory).
"""
import triton
import triton.language as tl


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
def lb_written(x, ACC: tl.constexpr):
    # The look-back workspace starts as all-one bits (a NaN no arithmetic produces); a word that
    # differs has been written, and each word is written once, so reading it needs no flag.
    if ACC == tl.float64:
        ok = x.to(tl.int64, bitcast=True) != -1
    else:
        ok = x.to(tl.int32, bitcast=True) != -1
    return ok


@triton.jit
def lb_word(x):
    return tl.where(x != x, float("nan"), x)  # a NaN result is stored as the canonical NaN


@triton.jit
def lb_wait(word, j, ACC: tl.constexpr):
    # The look-back's first wait (SPIN): until the nearest predecessor's first aggregate word
    # (j >= 0) is written, read that one word again.
    x = tl.load(word, mask=j >= 0, other=0.0, volatile=True)
    while not lb_written(x, ACC):
        x = tl.load(word, volatile=True)


@triton.jit
def lookback(ws_a, ws_b, ws_s, slot, step, agg_a, agg_b, init, WINDOW: tl.constexpr,
              SPIN: tl.constexpr, ACC: tl.constexpr):
    """Publish this chunk's aggregate, find its carry from earlier chunks, publish the result.

    Every word (aggregate a and b, inclusive state s) is written once, from the all-ones bit
    pattern to a value, so a reader tells a written word by its bits alone and needs no flags,
    fences or atomics (volatile loads read L2, never a stale L1 line). The look-back reads
    WINDOW predecessors at a time (their three words in one round trip to L2), nearest first, up
    to the nearest inclusive state; it reads again until every aggregate before that state is
    written, then composes them with one small scan, so a chain of P predecessors costs about
    P / WINDOW round trips. WINDOW is chosen per call (scangen.runtime.launch_params.lookback_window),
    and so is SPIN (lookback_spin): whether to wait on the nearest predecessor's aggregate
    alone, one word at a time, before the first window, which keeps the many waiting programs
    of rows of thousands of chunks from reading whole windows."""
    tl.store(ws_a + slot, lb_word(agg_a))
    tl.store(ws_b + slot, lb_word(agg_b))
    g_a = agg_a * 0.0  # the predecessors composed so far, nearest outermost
    g_b = g_a + 1.0
    base = init
    w = tl.arange(0, WINDOW)
    j = step - 1  # the nearest predecessor not composed yet
    if SPIN:
        lb_wait(ws_a + slot - 1, j, ACC)
    while j >= 0:
        idx = j - w  # [WINDOW] predecessors, nearest first
        live = idx >= 0
        # The three words of the window in one round trip; a and b past `stop` go unused.
        s = tl.load(ws_s + slot - step + idx, mask=live, other=0.0, volatile=True)
        a = tl.load(ws_a + slot - step + idx, mask=live, other=0.0, volatile=True)
        b = tl.load(ws_b + slot - step + idx, mask=live, other=1.0, volatile=True)
        stop = tl.min(tl.where(lb_written(s, ACC) | (idx < 0), w, WINDOW))
        take = w < stop  # compose these, then apply them to the state at `stop`
        ready = lb_written(a, ACC) & lb_written(b, ACC)
        if tl.min(tl.where(take, ready, True).to(tl.int32)) == 1:  # else read again
            sa, sb = tl.associative_scan((tl.where(take, a, 0.0), tl.where(take, b, 1.0)), 0,
                                         combine, reverse=True)
            wa = tl.sum(tl.where(w == 0, sa, 0.0))  # f_j o f_(j-1) o ... over the window
            wb = tl.sum(tl.where(w == 0, sb, 0.0))
            g_a = g_a + g_b * wa
            g_b = g_b * wb
            if stop < WINDOW:
                base = tl.sum(tl.where(w == stop, tl.where(live, s, init), 0.0))
                j = j * 0 - 1
            else:
                j = j - WINDOW
    carry = g_a + g_b * base
    tl.store(ws_s + slot, lb_word(agg_a + agg_b * carry))
    return carry


@triton.jit
def lookback_joint(ws, n, slot, step, p, q, r, u, v, init2, init1, WINDOW: tl.constexpr,
                    SPIN: tl.constexpr, ACC: tl.constexpr):
    """lookback for two scans scanned jointly (plan.JointPlan): the aggregate is the five
    words of the map x -> [[p, q], [0, r]] x + (u, v) on x = (second, first), the inclusive
    state two words (second, first); word array k starts at ws + k * n. Returns the carry
    (second, first)."""
    tl.store(ws + slot, lb_word(p))
    tl.store(ws + n + slot, lb_word(q))
    tl.store(ws + 2 * n + slot, lb_word(r))
    tl.store(ws + 3 * n + slot, lb_word(u))
    tl.store(ws + 4 * n + slot, lb_word(v))
    gq = p * 0.0  # the predecessors composed so far, nearest outermost
    gp = gq + 1.0
    gr = gp
    gu = gq
    gv = gq
    b2 = init2
    b1 = init1
    w = tl.arange(0, WINDOW)
    j = step - 1
    if SPIN:
        lb_wait(ws + slot - 1, j, ACC)
    while j >= 0:
        idx = j - w
        live = idx >= 0
        o = slot - step + idx
        s2 = tl.load(ws + 5 * n + o, mask=live, other=0.0, volatile=True)
        s1 = tl.load(ws + 6 * n + o, mask=live, other=0.0, volatile=True)
        a0 = tl.load(ws + o, mask=live, other=1.0, volatile=True)
        a1 = tl.load(ws + n + o, mask=live, other=0.0, volatile=True)
        a2 = tl.load(ws + 2 * n + o, mask=live, other=1.0, volatile=True)
        a3 = tl.load(ws + 3 * n + o, mask=live, other=0.0, volatile=True)
        a4 = tl.load(ws + 4 * n + o, mask=live, other=0.0, volatile=True)
        stop = tl.min(tl.where((lb_written(s2, ACC) & lb_written(s1, ACC)) | (idx < 0), w,
                               WINDOW))
        take = w < stop
        ready = (lb_written(a0, ACC) & lb_written(a1, ACC) & lb_written(a2, ACC)
                 & lb_written(a3, ACC) & lb_written(a4, ACC))
        if tl.min(tl.where(take, ready, True).to(tl.int32)) == 1:  # else read again
            cp, cq, cr, cu, cv = tl.associative_scan(
                (tl.where(take, a0, 1.0), tl.where(take, a1, 0.0), tl.where(take, a2, 1.0),
                 tl.where(take, a3, 0.0), tl.where(take, a4, 0.0)), 0, combine_joint,
                reverse=True)
            gp, gq, gr, gu, gv = combine_joint(
                tl.sum(tl.where(w == 0, cp, 0.0)), tl.sum(tl.where(w == 0, cq, 0.0)),
                tl.sum(tl.where(w == 0, cr, 0.0)), tl.sum(tl.where(w == 0, cu, 0.0)),
                tl.sum(tl.where(w == 0, cv, 0.0)), gp, gq, gr, gu, gv)
            if stop < WINDOW:
                b2 = tl.sum(tl.where(w == stop, tl.where(live, s2, init2), 0.0))
                b1 = tl.sum(tl.where(w == stop, tl.where(live, s1, init1), 0.0))
                j = j * 0 - 1
            else:
                j = j - WINDOW
    c2 = gp * b2 + gq * b1 + gu
    c1 = gr * b1 + gv
    tl.store(ws + 5 * n + slot, lb_word(p * c2 + q * c1 + u))
    tl.store(ws + 6 * n + slot, lb_word(r * c1 + v))
    return c2, c1


@triton.jit
def lookback_rows(ws_a, ws_b, ws_s, slot, step, agg_a, agg_b, init, BN: tl.constexpr,
                  WINDOW: tl.constexpr, SPIN: tl.constexpr, ACC: tl.constexpr):
    """lookback for a tile of BN rows: agg_a, agg_b and init are [BN], and every array holds BN
    words a ticket (ticket ``slot``'s row r at ``slot * BN + r``). Each row finds its own
    nearest inclusive state: the tile reads windows of WINDOW predecessors x BN rows until every
    row has one, composing a row's aggregates only up to its own. Returns the [BN] carries."""
    r = tl.arange(0, BN)
    tl.store(ws_a + slot * BN + r, lb_word(agg_a))
    tl.store(ws_b + slot * BN + r, lb_word(agg_b))
    g_a = agg_a * 0.0  # each row's predecessors composed so far, nearest outermost
    g_b = g_a + 1.0
    base = init
    done = r < 0  # rows whose inclusive state is found
    w = tl.arange(0, WINDOW)
    j = step - 1
    if SPIN:
        lb_wait(ws_a + (slot - 1) * BN, j, ACC)
    while j >= 0:
        idx = j - w  # [W] predecessors, nearest first
        live = idx >= 0
        o = (slot - step + idx)[:, None] * BN + r[None, :]  # [W, BN]
        m = live[:, None] & ~done[None, :]
        s = tl.load(ws_s + o, mask=m, other=0.0, volatile=True)
        a = tl.load(ws_a + o, mask=m, other=0.0, volatile=True)
        b = tl.load(ws_b + o, mask=m, other=1.0, volatile=True)
        found = lb_written(s, ACC) | (idx < 0)[:, None]
        stop = tl.min(tl.where(found, w[:, None], WINDOW), axis=0)  # [BN]
        take = (w[:, None] < stop[None, :]) & ~done[None, :]
        ready = lb_written(a, ACC) & lb_written(b, ACC)
        if tl.min(tl.where(take, ready, True).to(tl.int32)) == 1:  # else read again
            sa, sb = tl.associative_scan((tl.where(take, a, 0.0), tl.where(take, b, 1.0)), 0,
                                         combine, reverse=True)
            g_a = g_a + g_b * tl.sum(tl.where(w[:, None] == 0, sa, 0.0), axis=0)
            g_b = g_b * tl.sum(tl.where(w[:, None] == 0, sb, 0.0), axis=0)
            fin = (stop < WINDOW) & ~done
            at = w[:, None] == stop[None, :]
            found_s = tl.sum(tl.where(at, tl.where(live[:, None], s, init[None, :]), 0.0), axis=0)
            base = tl.where(fin, found_s, base)
            done = done | fin
            if tl.min(done.to(tl.int32)) == 1:
                j = j * 0 - 1
            else:
                j = j - WINDOW
    carry = g_a + g_b * base
    tl.store(ws_s + slot * BN + r, lb_word(agg_a + agg_b * carry))
    return carry


@triton.jit
def lookback_joint_rows(ws, n, slot, step, p, q, r, u, v, init2, init1, BN: tl.constexpr,
                        WINDOW: tl.constexpr, SPIN: tl.constexpr, ACC: tl.constexpr):
    """lookback_joint for a tile of BN rows (as lookback_rows): word array k starts at
    ws + k * n, ticket ``slot``'s row i at ``slot * BN + i``. Returns the [BN] carries
    (second, first)."""
    i = tl.arange(0, BN)
    me = slot * BN + i
    tl.store(ws + me, lb_word(p))
    tl.store(ws + n + me, lb_word(q))
    tl.store(ws + 2 * n + me, lb_word(r))
    tl.store(ws + 3 * n + me, lb_word(u))
    tl.store(ws + 4 * n + me, lb_word(v))
    gq = p * 0.0
    gp = gq + 1.0
    gr = gp
    gu = gq
    gv = gq
    b2 = init2
    b1 = init1
    done = i < 0
    w = tl.arange(0, WINDOW)
    j = step - 1
    if SPIN:
        lb_wait(ws + (slot - 1) * BN, j, ACC)
    while j >= 0:
        idx = j - w
        live = idx >= 0
        o = (slot - step + idx)[:, None] * BN + i[None, :]
        m = live[:, None] & ~done[None, :]
        s2 = tl.load(ws + 5 * n + o, mask=m, other=0.0, volatile=True)
        s1 = tl.load(ws + 6 * n + o, mask=m, other=0.0, volatile=True)
        a0 = tl.load(ws + o, mask=m, other=1.0, volatile=True)
        a1 = tl.load(ws + n + o, mask=m, other=0.0, volatile=True)
        a2 = tl.load(ws + 2 * n + o, mask=m, other=1.0, volatile=True)
        a3 = tl.load(ws + 3 * n + o, mask=m, other=0.0, volatile=True)
        a4 = tl.load(ws + 4 * n + o, mask=m, other=0.0, volatile=True)
        found = (lb_written(s2, ACC) & lb_written(s1, ACC)) | (idx < 0)[:, None]
        stop = tl.min(tl.where(found, w[:, None], WINDOW), axis=0)
        take = (w[:, None] < stop[None, :]) & ~done[None, :]
        ready = (lb_written(a0, ACC) & lb_written(a1, ACC) & lb_written(a2, ACC)
                 & lb_written(a3, ACC) & lb_written(a4, ACC))
        if tl.min(tl.where(take, ready, True).to(tl.int32)) == 1:  # else read again
            cp, cq, cr, cu, cv = tl.associative_scan(
                (tl.where(take, a0, 1.0), tl.where(take, a1, 0.0), tl.where(take, a2, 1.0),
                 tl.where(take, a3, 0.0), tl.where(take, a4, 0.0)), 0, combine_joint,
                reverse=True)
            first = w[:, None] == 0
            gp, gq, gr, gu, gv = combine_joint(
                tl.sum(tl.where(first, cp, 0.0), axis=0), tl.sum(tl.where(first, cq, 0.0), axis=0),
                tl.sum(tl.where(first, cr, 0.0), axis=0), tl.sum(tl.where(first, cu, 0.0), axis=0),
                tl.sum(tl.where(first, cv, 0.0), axis=0), gp, gq, gr, gu, gv)
            fin = (stop < WINDOW) & ~done
            at = w[:, None] == stop[None, :]
            b2 = tl.where(fin, tl.sum(tl.where(at, tl.where(live[:, None], s2, init2[None, :]), 0.0),
                                      axis=0), b2)
            b1 = tl.where(fin, tl.sum(tl.where(at, tl.where(live[:, None], s1, init1[None, :]), 0.0),
                                      axis=0), b1)
            done = done | fin
            if tl.min(done.to(tl.int32)) == 1:
                j = j * 0 - 1
            else:
                j = j - WINDOW
    c2 = gp * b2 + gq * b1 + gu
    c1 = gr * b1 + gv
    tl.store(ws + 5 * n + me, lb_word(p * c2 + q * c1 + u))
    tl.store(ws + 6 * n + me, lb_word(r * c1 + v))
    return c2, c1
