/* SPDX-License-Identifier: MIT */
#include "core/rcu.h"

#if defined(__SANITIZE_THREAD__)
char vbi_rcu_tsan_token;
#endif

void vbi_rcu_synchronize(void)
{
	urcu_memb_synchronize_rcu();
	VBI_TSAN_ACQUIRE();
}
