"""The look-back family's helpers (scangen.runtime.config: one program per chunk of a row or of a
tile of rows, its carry from the chunks before it), which every generated ``<module>_triton``
imports.

``lookback_ticket`` and ``lookback_reset`` give a program its ticket and its words of the
workspace (words written once, scangen.runtime.workspace); ``lookback_tile`` and
``lookback_joint_tile`` find a chunk's carry, with ``lookback`` and ``lookback_joint`` for one
row and ``lookback_rows`` and ``lookback_joint_rows`` for a tile of rows at once (time-major
buffers, whose rows are adjacent in memory).
"""
import triton
import triton.language as tl

from .common import combine, combine_joint


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


@triton.jit
def lookback_ticket(ws, ROWS, T, BN: tl.constexpr, BT: tl.constexpr, WORDS: tl.constexpr,
                    PID: tl.constexpr, ACC: tl.constexpr):
    """This look-back program's ticket and its words of the workspace ``ws``.

    Each (row tile, chunk) is one ticket (a tile: one row, or BN adjacent rows of a time-major
    buffer; all tiles' first chunks in scan order, then their second, ...) whose carries come
    from the tickets before it in its tile (lookback, lookback_rows). One program per ticket:
    tickets taken from a counter in the order programs reach it, or (PID, runtime.lookback_pid)
    the program's id, as CUB's single-pass scans do on the hardware's rule that a grid's
    programs start in increasing order of id; with it no load waits on the counter's round
    trip. Either way a ticket's chunk comes after its predecessors' in the order programs start,
    so they have started and the look-back cannot deadlock. (A persistent variant, a few
    programs per SM taking tickets in a loop, measured slower than one program per ticket at
    every shape, best tile against best tile: bench/NOTES.md, eleventh round.)

    The workspace (runtime.lookback_workspace), kept across the calls of a plan on one stream:
    an int64 counter that only grows, then two halves of WORDS arrays of words (each scan's
    aggregate a and b and inclusive state; a joint pair's seven words), one word per ticket and
    row of its tile. A call counts P tickets (P: tickets of one call); the call that counts
    c * P .. c * P + P - 1 works in half c % 2, which the call before it left all-one bits, and
    resets its words of the other half for the next call (lookback_reset: here, or with PID
    after the chunk's stores; bench/NOTES.md, tenth round, measured both): no fill per call,
    and the replays of a CUDA graph advance the counter as calls do.

    Returns the ticket's row tile and its step (chunk in scan order), its slot (word) in every
    array, the first array of its half, its words of the other half and the words of one array.
    """
    n_tiles = tl.cdiv(ROWS, BN)  # tiles of BN rows (one row, or time-major tiles)
    n_prog = n_tiles * tl.cdiv(T, BT)
    n_words = n_prog * BN  # words of one array: BN a ticket
    counter = ws.to(tl.pointer_type(tl.int64), bitcast=True)
    if PID:
        count = tl.atomic_add(counter, 1, sem="relaxed") + 1  # from -1
        ticket = tl.program_id(0)
    else:
        count = tl.atomic_add(counter, 1) + 1
        ticket = (count % n_prog).to(tl.int32)
    half = (count // n_prog) % 2
    tile = ticket % n_tiles
    step = ticket // n_tiles
    slot = tile * tl.cdiv(T, BT) + step  # this program's word(s) in every array
    ws_w = (ws + 2).to(tl.pointer_type(ACC), bitcast=True) + half * WORDS * n_words
    ws_clear = ((ws + 2).to(tl.pointer_type(tl.int64 if ACC == tl.float64 else tl.int32), bitcast=True)
                + (1 - half) * WORDS * n_words + slot * BN)
    if not PID:
        lookback_reset(ws_clear, n_words, WORDS, BN)
    return tile, step, slot, ws_w, ws_clear, n_words


@triton.jit
def lookback_reset(ws_clear, n_words, WORDS: tl.constexpr, BN: tl.constexpr):
    # This ticket's words of the half no program of this call reads, all-one bits again for the
    # call after the next (lookback_ticket).
    for w in tl.static_range(WORDS):
        if BN == 1:
            tl.store(ws_clear + w * n_words, -1)
        else:
            tl.store(ws_clear + w * n_words + tl.arange(0, BN), -1)


@triton.jit
def lookback_tile(ws, BASE: tl.constexpr, n, slot, step, a, b, carry, at, BN: tl.constexpr,
                  WINDOW: tl.constexpr, SPIN: tl.constexpr, ACC: tl.constexpr):
    # The carry of a chunk from the chunks before it in scan order: its aggregate (the scanned
    # maps a, b of the [BN, BT] tile at its far column, where `at` holds) published, the
    # predecessors' looked back over (lookback; lookback_rows for a tile of rows), in the
    # scan's word arrays BASE, BASE + 1, BASE + 2 of n words from `ws`. `carry`: the state
    # before the row's first chunk, per row. Returns the carry to apply to the tile: a scalar
    # for one row, [BN, 1] for a tile of rows.
    if BN == 1:
        agg_a = tl.sum(tl.where(at, a, 0.0))
        agg_b = tl.sum(tl.where(at, b, 0.0))
        c = lookback(ws + BASE * n, ws + (BASE + 1) * n, ws + (BASE + 2) * n, slot, step, agg_a,
                     agg_b, tl.sum(carry), WINDOW, SPIN, ACC)
    else:
        agg_a = tl.sum(tl.where(at, a, 0.0), axis=1)
        agg_b = tl.sum(tl.where(at, b, 0.0), axis=1)
        c = lookback_rows(ws + BASE * n, ws + (BASE + 1) * n, ws + (BASE + 2) * n, slot, step,
                          agg_a, agg_b, carry, BN, WINDOW, SPIN, ACC)[:, None]
    return c


@triton.jit
def lookback_joint_tile(ws, BASE: tl.constexpr, n, slot, step, x, carry2, carry1, at,
                        BN: tl.constexpr, WINDOW: tl.constexpr, SPIN: tl.constexpr,
                        ACC: tl.constexpr):
    # lookback_tile for two scans scanned jointly: `x` the scanned maps (p, q, r, u, v) of the
    # tile, their seven word arrays from BASE, `carry2` and `carry1` the states (second, first)
    # before the row's first chunk. Returns the tile's states (second, first), not the carries
    # (nothing after the look-back reads them), applied as the template applied them, so the
    # kernels' code stayed as it was (bench/dev/ptx_digest.py).
    p, q, r, u, v = x
    if BN == 1:
        c2, c1 = lookback_joint(ws + BASE * n, n, slot, step, tl.sum(tl.where(at, p, 0.0)),
                                tl.sum(tl.where(at, q, 0.0)), tl.sum(tl.where(at, r, 0.0)),
                                tl.sum(tl.where(at, u, 0.0)), tl.sum(tl.where(at, v, 0.0)),
                                tl.sum(carry2), tl.sum(carry1), WINDOW, SPIN, ACC)
        first = v + r * c1
        second = u + p * c2 + q * c1
    else:
        c2, c1 = lookback_joint_rows(
            ws + BASE * n, n, slot, step, tl.sum(tl.where(at, p, 0.0), axis=1),
            tl.sum(tl.where(at, q, 0.0), axis=1), tl.sum(tl.where(at, r, 0.0), axis=1),
            tl.sum(tl.where(at, u, 0.0), axis=1), tl.sum(tl.where(at, v, 0.0), axis=1),
            carry2, carry1, BN, WINDOW, SPIN, ACC)
        first = v + r * c1[:, None]
        second = u + p * c2[:, None] + q * c1[:, None]
    return second, first
