/* SPDX-License-Identifier: MIT */
/*
 * `ip link set d0 down` gives PORT_ERR through the device's async-event
 * thread and the registered callback; `ip link set d0 up` gives PORT_ACTIVE.
 * dev_query follows the port state. Runs only as root inside the Soft-RoCE
 * VM (VERBUS_IN_VM): it must never take a host interface down. The netdev
 * is $VERBUS_TEST_NETDEV (default d0, under rxe0 / 10.77.0.1). The link is
 * brought back up and the port is ACTIVE again with its GID before the test
 * ends, so tests that run after it see an intact device.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tests/rxe/transport_harness.h"

static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cond = PTHREAD_COND_INITIALIZER;
static unsigned ev_count[VBT_EV__COUNT];
static uint8_t ev_port[VBT_EV__COUNT];
static struct vbt_dev *ev_dev[VBT_EV__COUNT];

static void on_event(const struct vbt_event *ev, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&ev_lock);
	ev_count[ev->type]++;
	ev_port[ev->type] = ev->port;
	ev_dev[ev->type] = ev->dev;
	pthread_cond_broadcast(&ev_cond);
	pthread_mutex_unlock(&ev_lock);
}

static int wait_event(enum vbt_event_type t, int secs)
{
	struct timespec dl;
	int ok;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += secs;
	pthread_mutex_lock(&ev_lock);
	while (!ev_count[t])
		if (pthread_cond_timedwait(&ev_cond, &ev_lock, &dl))
			break;
	ok = ev_count[t] > 0;
	pthread_mutex_unlock(&ev_lock);
	return ok;
}

static const char *netdev(void)
{
	const char *n = getenv("VERBUS_TEST_NETDEV");

	return n && *n ? n : "d0";
}

static int link_set(const char *how)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "ip link set %s %s", netdev(), how);
	printf("+ %s\n", cmd);
	return system(cmd);
}

/* Poll dev_query until the port is in @st (and, when ACTIVE, its GID is
 * the one we opened with): 1 on success. */
static int wait_port(struct vbt_dev *dev, enum vbt_port_state st, int ms)
{
	uint64_t end = th_now_us() + (uint64_t)ms * 1000u;
	struct vbt_dev_caps c;

	while (th_now_us() < end) {
		if (!dev->ops->dev_query(dev, &c) && c.port_state == st &&
		    (st != VBT_PORT_ACTIVE || !memcmp(c.gid, dev->caps.gid, 16)))
			return 1;
		usleep(10000);
	}
	return 0;
}

static void test_port_down_up(void **state)
{
	struct vbt_dev_attr a = { .ip = th_ip(), .gid_index = -1, .event_cb = on_event };
	struct vbt_dev *dev;
	int down_seen, up_seen;
	uint64_t t0;

	assert_int_equal(vbt_dev_open(&vbt_verbs_ops, &a, &dev), 0);
	assert_int_equal(dev->caps.port_state, VBT_PORT_ACTIVE);
	t0 = th_now_us();
	assert_int_equal(link_set("down"), 0);
	down_seen = wait_event(VBT_EV_PORT_ERR, 30);
	printf("PORT_ERR %s after %.1f ms\n", down_seen ? "delivered" : "NOT delivered",
	       (th_now_us() - t0) / 1e3);
	int port_down = wait_port(dev, VBT_PORT_DOWN, 10000);

	t0 = th_now_us();
	assert_int_equal(link_set("up"), 0);
	up_seen = wait_event(VBT_EV_PORT_ACTIVE, 30);
	printf("PORT_ACTIVE %s after %.1f ms\n", up_seen ? "delivered" : "NOT delivered",
	       (th_now_us() - t0) / 1e3);
	/* leave the device as we found it before asserting anything */
	int restored = wait_port(dev, VBT_PORT_ACTIVE, 30000);

	assert_true(down_seen);
	assert_true(port_down);
	assert_true(up_seen);
	assert_true(restored);
	pthread_mutex_lock(&ev_lock);
	assert_int_equal(ev_port[VBT_EV_PORT_ERR], dev->caps.port);
	assert_ptr_equal(ev_dev[VBT_EV_PORT_ERR], dev);
	assert_int_equal(ev_port[VBT_EV_PORT_ACTIVE], dev->caps.port);
	pthread_mutex_unlock(&ev_lock);
	dev->ops->dev_close(dev);
	assert_int_equal(th_leaks(), 0);
}

int main(void)
{
	vbt_require_device();
	if (!getenv("VERBUS_IN_VM") || geteuid() != 0) {
		fprintf(stderr, "skipping: takes a netdev down; runs only as root in the VM\n");
		return VBT_SKIP;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_port_down_up),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
