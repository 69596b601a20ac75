/* SPDX-License-Identifier: MIT
 * sha256.c — ntfs_sha256 (common/util.h), in a file of its own so that a
 * program that never hashes (ntfs-ctl) does not pull libcrypto in with
 * util.o: one less library to load at each start (docs/jail.md, "Speed").
 */
#include "common/util.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>

#include "common/banned.h"

/* The digest is fetched from the provider once. EVP_sha256() would make
 * every EVP_Digest call fetch it again, under a lock all threads share:
 * measured 0.5 us for a file name's hash alone, and several times that
 * with the mount's worker threads contending (name hashes are on every
 * lookup and create); fetched once, 0.2 us. */
static EVP_MD *sha256_md;
static void sha256_fetch(void) {
        sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void ntfs_sha256(const void *buf, size_t len, uint8_t out[NTFS_HASH_LEN]) {
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, sha256_fetch);
        unsigned int n = NTFS_HASH_LEN;
        /* EVP_Digest with SHA-256 cannot fail for in-memory input short of
         * allocation failure inside OpenSSL (or no default provider at
         * all); treat that as fatal. */
        if (!sha256_md || EVP_Digest(buf, len, out, &n, sha256_md, NULL) != 1)
                abort();
}
