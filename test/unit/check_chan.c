/* chan_admit: which connection request becomes which channel.  The
 * post-copy channels follow the data channels, and the destination reads
 * from them: a request may become one only when it says it is one. */
#include <check.h>
#include <string.h>

#include "chan.h"
#include "privdata.h"
#include "suite.h"
#include "suites.h"

#define TOKEN 0x0123456789abcdefull

static size_t request(uint8_t *buf, unsigned channel, unsigned channels, uint32_t caps,
		      uint64_t token)
{
	struct pd_request r = { .ver_min = PD_VERSION_MIN, .ver_max = PD_VERSION_MAX,
				.caps = caps, .ctrl_depth = PD_DEPTH_MIN,
				.ctrl_msg_max = PD_MSG_MAX_MIN, .session_id = token,
				.channel = (uint16_t)channel, .channels = (uint16_t)channels };

	return pd_encode_request(&r, buf, PD_REQUEST_LEN);
}

static unsigned admit(unsigned channel, unsigned channels, uint32_t caps, unsigned granted,
		      unsigned pc_first, uint64_t open, char *note)
{
	uint8_t buf[PD_REQUEST_LEN];
	size_t n = request(buf, channel, channels, caps, TOKEN);

	note[0] = '\0';
	return chan_admit(buf, n, TOKEN, granted, pc_first, true, open, note, 256);
}

START_TEST(data_channels)
{
	char note[256];

	/* Four data channels, no post-copy: 1..3 admitted, once each. */
	ck_assert_uint_eq(admit(1, 4, PD_CAP_MULTI_CHANNEL, 4, 4, 0, note), 1);
	ck_assert_uint_eq(admit(3, 4, PD_CAP_MULTI_CHANNEL, 4, 4, 0, note), 3);
	ck_assert_uint_eq(admit(3, 4, PD_CAP_MULTI_CHANNEL, 4, 4, 1u << 3, note), 0);
	ck_assert_ptr_nonnull(strstr(note, "already open"));
	ck_assert_uint_eq(admit(0, 4, PD_CAP_MULTI_CHANNEL, 4, 4, 0, note), 0);
	ck_assert_uint_eq(admit(4, 4, PD_CAP_MULTI_CHANNEL, 4, 4, 0, note), 0);
	ck_assert_uint_eq(admit(2, 5, PD_CAP_MULTI_CHANNEL, 4, 4, 0, note), 0);
}
END_TEST

START_TEST(postcopy_channels_say_so)
{
	char note[256];

	/* One data channel (the control connection), then post-copy's two:
	 * indexes 1 and 2 of 3. */
	ck_assert_uint_eq(admit(1, 3, PD_CAP_POSTCOPY, 3, 1, 0, note), 1);
	ck_assert_uint_eq(admit(2, 3, PD_CAP_POSTCOPY, 3, 1, 1u << 1, note), 2);
	/* A data channel's request where post-copy's go, and the reverse. */
	ck_assert_uint_eq(admit(1, 3, PD_CAP_MULTI_CHANNEL, 3, 1, 0, note), 0);
	ck_assert_ptr_nonnull(strstr(note, "is not a post-copy channel"));
	ck_assert_uint_eq(admit(1, 5, PD_CAP_POSTCOPY | PD_CAP_MULTI_CHANNEL, 5, 3, 0, note), 0);
	ck_assert_ptr_nonnull(strstr(note, "claims to be"));
	/* Data channels 1..2 and post-copy's 3..4 of 5. */
	ck_assert_uint_eq(admit(2, 5, PD_CAP_MULTI_CHANNEL, 5, 3, 0, note), 2);
	ck_assert_uint_eq(admit(4, 5, PD_CAP_POSTCOPY, 5, 3, 0, note), 4);
}
END_TEST

START_TEST(wrong_token_or_peer)
{
	uint8_t buf[PD_REQUEST_LEN];
	char note[256];
	size_t n = request(buf, 1, 3, PD_CAP_POSTCOPY, TOKEN + 1);

	ck_assert_uint_eq(chan_admit(buf, n, TOKEN, 3, 1, true, 0, note, sizeof(note)), 0);
	n = request(buf, 1, 3, PD_CAP_POSTCOPY, TOKEN);
	ck_assert_uint_eq(chan_admit(buf, n, TOKEN, 3, 1, false, 0, note, sizeof(note)), 0);
	ck_assert_uint_eq(chan_admit(buf, n, TOKEN, 3, 1, true, 0, note, sizeof(note)), 1);
}
END_TEST

START_TEST(no_resume_on_the_channels_port)
{
	struct pd_request r = { .ver_min = PD_VERSION_MIN, .ver_max = PD_VERSION_MAX,
				.caps = PD_CAP_POSTCOPY, .ctrl_depth = PD_DEPTH_MIN,
				.ctrl_msg_max = PD_MSG_MAX_MIN, .session_id = TOKEN,
				.channel = 0, .channels = 1, .resume = true, .token = { 1 } };
	uint8_t buf[PD_RESUME_LEN];
	char note[256];
	size_t n = pd_encode_request(&r, buf, sizeof(buf));

	ck_assert_uint_eq(n, PD_RESUME_LEN);
	ck_assert_uint_eq(chan_admit(buf, n, TOKEN, 3, 1, true, 0, note, sizeof(note)), 0);
	ck_assert_str_eq(note, "refused a resume on the channels' port");
}
END_TEST

void chan_cases(Suite *s)
{
	TCase *tc = tu_case(s, "admit", 0);

	tcase_add_test(tc, data_channels);
	tcase_add_test(tc, postcopy_channels_say_so);
	tcase_add_test(tc, wrong_token_or_peer);
	tcase_add_test(tc, no_resume_on_the_channels_port);
}
