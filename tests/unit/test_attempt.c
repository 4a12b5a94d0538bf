/* test_attempt.c: an attempt's phases and kinds (serve/attempt.c). */
#include "lg_test.h"
#include "serve/attempt.h"

/* The moves attempt_types.h draws, and no other. */
static int
test_phase_moves(void)
{
    static const struct {
        enum lg_attempt_phase from, to;
    } legal[] = {
        { LG_ATTEMPT_PH_IDLE, LG_ATTEMPT_PH_CONNECT },
        { LG_ATTEMPT_PH_IDLE, LG_ATTEMPT_PH_WAIT_HEAD },
        { LG_ATTEMPT_PH_IDLE, LG_ATTEMPT_PH_DONE },
        { LG_ATTEMPT_PH_CONNECT, LG_ATTEMPT_PH_WAIT_HEAD },
        { LG_ATTEMPT_PH_CONNECT, LG_ATTEMPT_PH_DONE },
        { LG_ATTEMPT_PH_WAIT_HEAD, LG_ATTEMPT_PH_RELAY },
        { LG_ATTEMPT_PH_WAIT_HEAD, LG_ATTEMPT_PH_DONE },
        { LG_ATTEMPT_PH_RELAY, LG_ATTEMPT_PH_DONE },
        { LG_ATTEMPT_PH_DONE, LG_ATTEMPT_PH_IDLE },
    };
    unsigned n = 0;

    for (int from = 0; from < LG_ATTEMPT_NPHASES; from++) {
        for (int to = 0; to < LG_ATTEMPT_NPHASES; to++) {
            bool want = false;

            for (size_t i = 0; i < LG_ARRAY_SIZE(legal); i++) {
                want |= legal[i].from == (enum lg_attempt_phase)from
                        && legal[i].to == (enum lg_attempt_phase)to;
            }
            LG_CHECK(lg_attempt_can_move(from, to) == want);
            n += want;
        }
    }
    LG_CHECK(n == LG_ARRAY_SIZE(legal));
    /* nothing goes back to a phase it left, but through DONE -> IDLE */
    LG_CHECK(!lg_attempt_can_move(LG_ATTEMPT_PH_RELAY, LG_ATTEMPT_PH_WAIT_HEAD));
    LG_CHECK(!lg_attempt_can_move(LG_ATTEMPT_PH_DONE, LG_ATTEMPT_PH_DONE));
    LG_CHECK(!lg_attempt_can_move(LG_ATTEMPT_PH_IDLE, LG_ATTEMPT_PH_RELAY));
    LG_CHECK(!lg_attempt_can_move(LG_ATTEMPT_NPHASES, LG_ATTEMPT_PH_IDLE));
    return 0;
}

static int
test_kind_names(void)
{
    LG_CHECK_STR(lg_attempt_kind_name(LG_ATTEMPT_FIRST), "first");
    LG_CHECK_STR(lg_attempt_kind_name(LG_ATTEMPT_RETRY), "retry");
    LG_CHECK_STR(lg_attempt_kind_name(LG_ATTEMPT_HEDGE), "hedge");
    LG_CHECK_STR(lg_attempt_kind_name(LG_ATTEMPT_CONTINUATION), "continuation");
    return 0;
}

LG_TEST_MAIN(test_phase_moves, test_kind_names)
