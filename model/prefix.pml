/*
 * A prefix fence P over two keys K0 and K1 below it, as a Promela model for
 * spin (see README.md beside this file, and barrier.pml, the barrier of one
 * resource, which this extends).
 *
 * What is modelled: P's maximum mp and its `praising` flag (a raise of P is
 * in progress: writes below P wait for its outcome); per key its own maximum,
 * `raising` flag and in-flight count per token; per forwarded write its upload
 * state (SENDING -> SENT or SENDING -> CUT) and the backend's view of it; the
 * abandon grace; one raise of P that is not a write (lease acquire, admin
 * raise).
 *
 * Each step a process takes under one lock is one `atomic` block: a writer's
 * check and registration (under its key's lock, reading the prefix index
 * under that index's own lock), its recheck of the prefix after registration,
 * the raise of P's maximum, the scan of each key (under that key's lock).
 * Everything else is a step of its own, so spin tries every interleaving.
 *
 * Properties (assertions in the backend, where a write with token t on key k
 * is applied):
 *   Safety A: t >= the largest token of a raise of P that returned, and of a
 *             write on k that was admitted.
 *   Safety B: per key, the backend applies writes in non-decreasing token order.
 *   No invalid end state: every process ends, or waits in the backend's loop.
 *
 * Switches, each removing one protection:
 *   NO_PREFIX_CUT    the raise of P neither cuts uploads below mp nor waits
 *                    for the drain (scan and wait gone)
 *   NO_PREFIX_DRAIN  the raise of P cuts, but does not wait for the drain
 *   NO_RECHECK       a writer checks the prefix only before it registers in
 *                    flight, not after (caught only with LOOSE_CHECK: alone,
 *                    the check under the key's lock suffices; see README.md)
 * Other options:
 *   LOOSE_CHECK      a writer reads the prefix index for its first check in a
 *                    step of its own, before it takes its key's lock (not what
 *                    fence/barrier.go does: there it reads it under the lock)
 *   W0 W1 W2         the writers' tokens (default 1, 1, 2; keys 0, 1, 0)
 *   PT               the token of the raise of P (default 2); tokens are 0..3
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
#ifndef PT
#define PT 2
#endif

#define NW 3 /* writers */
#define NK 2 /* keys below P */
#define NT 4 /* tokens 0..3 */

/* Upload (body) state of a forwarded write, as the barrier sees it. */
#define NONE    0 /* not registered, or its exchange is over */
#define SENDING 1 /* body still being handed to the backend: a larger token may cut it */
#define SENT    2 /* whole body handed over: the backend may apply it */
#define CUT     3 /* cut off before its end: the backend can never apply it */

/* A write as the backend sees it. */
#define IDLE    0 /* nothing (or only part of a body) reached the backend */
#define PENDING 1 /* the whole request reached the backend: it may apply it */
#define HANDLED 2 /* the backend applied it or dropped it */

byte mp;                  /* P's durable maximum, as the prefix index publishes it */
bool praising;            /* a raise of P is in progress: writes below P wait for its outcome */

byte m[NK];               /* durable maximum of each key */
bool raising[NK];         /* a raise of the key is being made durable */
byte inflight[NK * NT];   /* forwarded (registered), unfinished writes per key and token */

byte key[NW];             /* key of writer i (constant) */
byte tok[NW];             /* token of writer i (constant) */
byte fl[NW];              /* upload state of writer i's write */
byte req[NW];             /* backend's view of writer i's write */
bool gaveUp[NW];          /* the proxy gave up on writer i's exchange: the backend may drop it */

/* Ghost variables for the properties. */
byte fencedP;             /* largest token of a raise of P that returned */
byte fenced[NK];          /* per key, the largest token of an admitted write */
byte lastApplied[NK];     /* per key, the token of the last write the backend applied */

#define max(a, b) ((a) > (b) -> (a) : (b))
#define IN(k, t) inflight[(k) * NT + (t)]

/* A write on key k with a token below t is in flight. */
#define BELOW(k, t) ((IN(k, 0) > 0 && 0 < (t)) || (IN(k, 1) > 0 && 1 < (t)) || \
                     (IN(k, 2) > 0 && 2 < (t)))

/* Cut writer j's upload if it is on key k, below t, and still sending: the
 * CAS SENDING -> CUT. A sent body cannot be recalled. */
#define CUT1(j, k, t) if :: key[j] == (k) && fl[j] == SENDING && tok[j] < (t) -> fl[j] = CUT \
                         :: else -> skip fi
#define CUTBELOW(k, t) CUT1(0, k, t); CUT1(1, k, t); CUT1(2, k, t)

/* The backend applies writer j's write: both properties are checked here. */
inline apply(j) {
	assert(tok[j] >= lastApplied[key[j]]);     /* Safety B */
	assert(tok[j] >= fencedP);                 /* Safety A: raises of P */
	assert(tok[j] >= fenced[key[j]]);          /* Safety A: writes on the key */
	lastApplied[key[j]] = tok[j];
	req[j] = HANDLED
}

/* A fenced write with token t on key k (writer i), below P. */
proctype writer(byte i) {
	byte k = key[i];
	byte t = tok[i];
#ifdef LOOSE_CHECK
	bool seenR;               /* P raising, as read before the key's lock */
	byte seenM;               /* P's maximum, as read before the key's lock */
#define PRAISING seenR
#define MP seenM
#else
#define PRAISING praising
#define MP mp
#endif

check:
#ifdef LOOSE_CHECK
	atomic { seenR = praising; seenM = mp };
#endif
	/* Under k's lock: wait while k is raising, read m[k], check P, decide. */
	atomic {
		!raising[k] ->
		if
		:: t < m[k] -> goto refused               /* 409 */
		:: else
		fi;
		if
		:: PRAISING -> goto waitp                 /* release k's lock, wait for P's outcome */
		:: !PRAISING && t < MP -> goto refused    /* 409 from P */
		:: else
		fi;
		if
		:: t > m[k] -> raising[k] = true; goto raise
		:: t == m[k] && BELOW(k, t) ->
			CUTBELOW(k, t); goto drain        /* smaller uploads on k are stale */
		:: t == m[k] && !BELOW(k, t) ->
			/* register: counted in flight, upload cuttable */
			IN(k, t)++; fl[i] = SENDING;
#ifdef NO_RECHECK
			fenced[k] = max(fenced[k], t);    /* admitted */
			goto upload
#else
			goto recheck
#endif
		fi
	}

	/* k's durable raise, outside the lock. */
raise:
	atomic { m[k] = max(m[k], t); raising[k] = false; goto check }

	/* Wait until the smaller writes on k are over (or k moved on). */
drain:
	atomic { (!BELOW(k, t) || m[k] != t) -> goto check }

	/* Wait until the raise of P is over. */
waitp:
	atomic { !praising -> goto check }

#ifndef NO_RECHECK
	/* In flight now: check P again. A raise of P that began after the check
	 * above sees this write in its scan; one published before is seen here. */
recheck:
	atomic {
		if
		:: praising || t < mp ->
			IN(k, t)--; fl[i] = NONE;         /* unregister; waiters wake */
			if
			:: praising -> goto waitp
			:: else -> goto refused           /* 409 from P */
			fi
		:: else ->
			fenced[k] = max(fenced[k], t);    /* admitted: forwarded */
			goto upload
		fi
	}
#endif

	/* The upload: the last bytes go out only if the CAS SENDING -> SENT succeeds. */
upload:
	if
	:: atomic {
		if
		:: fl[i] == SENDING -> fl[i] = SENT; req[i] = PENDING
		:: else -> goto over                      /* CUT: 409; the backend got part of a body */
		fi
	   }
	:: atomic { fl[i] == SENDING -> goto over }   /* the client went away mid-upload */
	fi;

	/* The exchange: the backend's answer, or the proxy gives up. */
	if
	:: atomic { req[i] == HANDLED -> goto over }
	:: atomic { fl[i] == SENT -> gaveUp[i] = true };  /* timeout: abandoned, the barrier stays closed */
	   atomic { req[i] == HANDLED -> goto over }      /* the abandon grace ends, assumed after the backend */
	fi;

over:
	atomic { IN(k, t)--; fl[i] = NONE; req[i] = IDLE; gaveUp[i] = false; goto done }
refused:
done:
	skip
}

/* A raise of P to token T that is not a write (lease acquire, admin raise). */
proctype praiser(byte T) {
	byte mm; /* P's maximum after the raise */

	praising = true;                              /* 1. begin: writes below P wait */
	atomic { mp = max(mp, T); mm = mp; praising = false }  /* 2. durable raise, published; end */
#ifndef NO_PREFIX_CUT
	/* 3. scan: under each key's lock, cut the uploads below mm still sending */
	atomic { CUTBELOW(0, mm) };
	atomic { CUTBELOW(1, mm) };
#ifndef NO_PREFIX_DRAIN
	/* 4. a sent body cannot be recalled: wait until nothing below mm is in
	 * flight on any key (looked at key by key, as the scan does) */
	!BELOW(0, mm);
	!BELOW(1, mm);
#endif
#endif
	fencedP = max(fencedP, T);                    /* the raise returned */
	mm = 0
}

/* The backend: applies any whole request it got, at any later time and in
 * any order; drops one only after the proxy gave up on it. */
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
		key[0] = 0; tok[0] = W0;
		key[1] = 1; tok[1] = W1;
		key[2] = 0; tok[2] = W2;
		run writer(0); run writer(1); run writer(2);
		run praiser(PT)
	}
}
