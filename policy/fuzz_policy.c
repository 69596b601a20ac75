/* SPDX-License-Identifier: MIT
 * fuzz_policy.c — libFuzzer target for the policy file parser.
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true -Dmodules=policy
 *        -Db_sanitize=address,undefined -Db_lundef=false
 * Run:   build-fuzz/policy/fuzz_policy tests/fuzz/policy/
 * The corpus is replayed by tests/unit/test_policy_corpus.c in every build.
 */
#include <stddef.h>
#include <stdint.h>

#include "policy/policy.h"
#include "common/banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        ntfs_policy *p = NULL;
        char why[256];
        if (ntfs_policy_parse((const char *)data, size, &p, why, sizeof why) == 0) {
                /* Exercise the accessors on whatever parsed. */
                struct ntfs_quota_usage u = { 0 };
                char w[256];
                (void)ntfs_policy_check_call(p, NULL, "bash_run", &u, w, sizeof w);
                (void)ntfs_policy_host_allowed(p, "a.example.com");
                (void)ntfs_policy_port_allowed(p, 443);
                ntfs_policy_free(p);
        }
        return 0;
}
