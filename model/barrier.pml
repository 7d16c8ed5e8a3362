/*
 * The fence barrier of one resource R, as a Promela model for spin.
 *
 * What is modelled (see README.md beside this file): the durable maximum m,
 * the `raising` flag, the in-flight count per token, the upload state of each
 * forwarded write (SENDING -> SENT or SENDING -> CUT), a backend that applies
 * handed-over writes in any order and at any later time, the abandon grace,
 * and raises that come from outside the write path (lease acquire, admin
 * raise, pool claim, peer replica).
 *
 * Each step of a process is one atomic step of the model: a step that the
 * proxy does under the resource's lock is one `atomic` block; everything
 * outside the lock is a step of its own, so spin tries every interleaving.
 *
 * Properties (assertions in the backend, where a write is applied):
 *   Safety A: no write with token t is applied after a raise to a token above
 *             t returned (a raise by a raiser, or the admission of a larger
 *             write, which is when a write's own raise "returns").
 *   Safety B: the backend applies writes in non-decreasing token order.
 *   No invalid end state: every process ends, or waits in the backend's loop.
 *
 * Switches, each removing one protection (the check script expects spin to
 * find an error for each):
 *   NO_CUT           the raiser neither cuts uploads below m nor waits for the drain
 *   NO_RAISER_DRAIN  the raiser cuts uploads below m but does not wait for the drain
 *   NO_SEND_CHECK    the fast path sends its buffered body without the CAS
 *                    SENDING -> SENT at the moment of sending
 *   NO_WRITER_DRAIN  an admitted write does not wait for smaller tokens in flight
 * Other options:
 *   TIMEOUTS         drain timeouts (writer: 503; raiser: error, not returned)
 *                    and failed durable raises (503, m unchanged)
 *   ONLY_A, ONLY_B   assert only Safety A, or only Safety B
 *   W0 W1 W2 R0 R1   the writers' tokens (default 1, 1, 2) and the raisers' tokens
 *                    (default 3, 2; R1 0: no second raiser); tokens are 0..3
 */

#ifndef W0
#define W0 1
#endif
#ifndef W1
#define W1 1
#endif
#ifndef W2
#define W2 2
#endif
#ifndef R0
#define R0 3
#endif
#ifndef R1
#define R1 2
#endif

#define NW   3 /* writers */
#define MAXT 3 /* largest token */

/* Upload (body) state of a forwarded write, as the barrier sees it. */
#define NONE    0 /* not admitted, or its exchange is over */
#define SENDING 1 /* body still being handed to the backend: a larger token may cut it */
#define SENT    2 /* whole body handed over: the backend may apply it */
#define CUT     3 /* cut off before its end: the backend can never apply it */

/* A write as the backend sees it. */
#define IDLE    0 /* nothing (or only part of a body) reached the backend */
#define PENDING 1 /* the whole request reached the backend: it may apply it */
#define HANDLED 2 /* the backend applied it or dropped it */

byte m;                /* durable maximum of R */
bool raising;          /* a raise is being made durable; newcomers wait for its outcome */
byte inflight[MAXT+1]; /* forwarded, unfinished writes per token */

byte tok[NW];          /* token of writer i (constant) */
byte fl[NW];           /* upload state of writer i's write: NONE, SENDING, SENT, CUT */
byte req[NW];          /* backend's view of writer i's write: IDLE, PENDING, HANDLED */
bool gaveUp[NW];       /* the proxy gave up on writer i's exchange (timeout): the backend may drop it */

/* Ghost variables for the properties. */
byte fenced;           /* largest token of a raise that returned or of an admitted write */
byte lastApplied;      /* token of the last write the backend applied */

#define max(a, b) ((a) > (b) -> (a) : (b))

/* A write with a token below t is in flight. */
#define BELOW(t) ((inflight[0] > 0 && 0 < (t)) || (inflight[1] > 0 && 1 < (t)) || \
                  (inflight[2] > 0 && 2 < (t)))

/* Cut writer j's upload if its token is below t and it is still sending:
 * the CAS SENDING -> CUT. A sent body cannot be recalled. */
#define CUT1(j, t) if :: fl[j] == SENDING && tok[j] < (t) -> fl[j] = CUT :: else -> skip fi
#define CUTBELOW(t) CUT1(0, t); CUT1(1, t); CUT1(2, t)

/* The backend applies writer j's write: both properties are checked here. */
inline apply(j) {
#ifndef ONLY_A
	assert(tok[j] >= lastApplied); /* Safety B */
#endif
#ifndef ONLY_B
	assert(tok[j] >= fenced);      /* Safety A */
#endif
	lastApplied = tok[j];
	req[j] = HANDLED
}

/*
 * A fenced write with token t (writer i). Every write has a body; a write
 * without one is a write whose upload ends right after its admission.
 */
proctype writer(byte i) {
	byte t = tok[i];

	/* 1.-3. under the resource lock: wait while raising, read m, decide. */
check:
	atomic {
		!raising ->
		if
		:: t < m -> goto refused                  /* 409, never forwarded */
		:: t > m -> raising = true; goto raise    /* others wait for the outcome */
#ifndef NO_WRITER_DRAIN
		:: t == m && BELOW(t) ->
			/* smaller uploads still sending are stale: cut them, then wait */
			CUTBELOW(t); goto drain
		:: t == m && !BELOW(t) ->
#else
		:: t == m ->
			CUTBELOW(t);                       /* cuts, but does not wait */
#endif
			/* admit: counted in flight, upload registered as cuttable */
			inflight[t]++; fl[i] = SENDING;
			fenced = max(fenced, t);
			goto upload
		fi
	}

	/* The durable raise, outside the lock; atomic in the store. */
raise:
	atomic {
		if
		:: m = max(m, t)
#ifdef TIMEOUTS
		:: raising = false; goto refused          /* store failed: 503, m unchanged */
#endif
		fi;
		raising = false;
		goto check                                /* a larger token may have been raised meanwhile */
	}

	/* Wait until something changes, then check again from the start. */
drain:
	if
	:: atomic { (!BELOW(t) || m != t) -> goto check }
#ifdef TIMEOUTS
	:: goto refused                               /* DRAIN_TIMEOUT: 503, nothing forwarded */
#endif
	fi;

	/*
	 * 4. The upload. Streaming and fast path alike: the body (or the buffered
	 * small body) is handed over with its last byte, and only if the CAS
	 * SENDING -> SENT succeeds. A cut in between (a raise while the fast
	 * path buffers) makes the CAS fail: the last bytes are never sent.
	 */
upload:
	if
	:: atomic {
#ifdef NO_SEND_CHECK
		/* the buffered body goes out whatever a larger token did meanwhile */
		req[i] = PENDING;
		if
		:: fl[i] == SENDING -> fl[i] = SENT
		:: else -> skip                           /* stays CUT in the barrier's eyes */
		fi
#else
		if
		:: fl[i] == SENDING -> fl[i] = SENT; req[i] = PENDING
		:: else -> goto over                      /* CUT: 409; the backend got part of a body */
		fi
#endif
	   }
	:: atomic {
		/* the client went away or paused past the upload idle timeout: the
		 * body ends early (499 or 408), the backend can never apply it */
		fl[i] == SENDING -> goto over
	   }
	fi;

	/* 5.-6. The exchange: the backend's answer, or the proxy gives up. */
	if
	:: atomic {
		req[i] == HANDLED ->                      /* answered: the exchange is over */
		goto over
	   }
	:: atomic {
		fl[i] == SENT ->                          /* timeout after the whole body was sent: */
		gaveUp[i] = true                          /* abandoned, the barrier stays closed */
	   };
	   atomic {
		/* the abandon grace ends; assumed: only after the backend applied or dropped it */
		req[i] == HANDLED -> goto over
	   }
#ifdef NO_SEND_CHECK
	:: atomic {
		fl[i] == CUT ->                           /* timeout; the barrier believes the body never */
		inflight[t]--; fl[i] = NONE; goto done    /* arrived: no abandon grace, the backend still has it */
	   }
#endif
	fi;

	/* The exchange is over: the write leaves the barrier, waiters wake. */
over:
	atomic { inflight[t]--; fl[i] = NONE; req[i] = IDLE; gaveUp[i] = false; goto done }
refused:
done:
	skip
}

/*
 * A raise that is not a write (lease acquire, admin raise, pool claim, peer
 * replica) to token T. It goes through the barrier like a write's raise.
 */
proctype raiser(byte T) {
	byte mm; /* the maximum after the raise, as the raise returns it */

	atomic { !raising -> raising = true }
	atomic {
		if
		:: m = max(m, T)
#ifdef TIMEOUTS
		:: raising = false; goto failed           /* store failed: error, m unchanged */
#endif
		fi;
		mm = m;
		raising = false
	}
#ifndef NO_CUT
	/* stale uploads still sending are cut: they can never be applied */
	d_step { CUTBELOW(mm) }
#ifndef NO_RAISER_DRAIN
	/* sent ones cannot be recalled: wait until they are over */
	if
	:: !BELOW(mm)
#ifdef TIMEOUTS
	:: goto failed                                /* DRAIN_TIMEOUT: error, not returned */
#endif
	fi;
#endif
#endif
	fenced = max(fenced, T);                      /* the raise returned */
failed:
	mm = 0
}

/*
 * The backend: applies any whole request it got, at any later time and in
 * any order; drops one only after the proxy gave up on it.
 */
active proctype backend() {
end:
	do
	:: atomic { req[0] == PENDING -> apply(0) }
	:: atomic { req[1] == PENDING -> apply(1) }
	:: atomic { req[2] == PENDING -> apply(2) }
	:: atomic { req[0] == PENDING && gaveUp[0] -> req[0] = HANDLED }
	:: atomic { req[1] == PENDING && gaveUp[1] -> req[1] = HANDLED }
	:: atomic { req[2] == PENDING && gaveUp[2] -> req[2] = HANDLED }
	od
}

init {
	atomic {
		tok[0] = W0; tok[1] = W1; tok[2] = W2;
		run writer(0); run writer(1); run writer(2);
		run raiser(R0);
#if R1 > 0
		run raiser(R1);
#endif
	}
}
