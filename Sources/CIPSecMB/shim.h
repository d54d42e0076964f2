#ifndef PHOTOVAULT_CIPSECMB_SHIM_H
#define PHOTOVAULT_CIPSECMB_SHIM_H
/* Intel's IPsec Multi-Buffer library (Debian: libipsec-mb-dev), used only for the bulk
   AES-256-GCM of file chunks on CPUs with VAES and VPCLMULQDQ (PhotoVaultCrypto,
   IPSecMBGCM.swift): its AVX-512 code opens a 4 KiB chunk about 2.6 times as fast as
   OpenSSL 3.0's. Debian builds it with SAFE_DATA (key material is cleared from registers
   and the stack after use) and SAFE_PARAM.
   The library's API is function-like macros over a manager's function pointers, which Swift
   does not import; these wrappers take the manager as an opaque pointer. */
#include <stdint.h>
#include <intel-ipsec-mb.h>

/* A manager for the AVX-512 VAES code, or NULL where the CPU lacks any of AES-NI, PCLMULQDQ,
   AVX-512 (F, DQ, CD, BW, VL), VAES or VPCLMULQDQ (the caller then keeps libcrypto). */
static inline void *pv_imb_vaes_manager(void) {
    IMB_MGR *m = alloc_mb_mgr(0);
    if (m == NULL) return NULL;
    IMB_ARCH arch = IMB_ARCH_NONE;
    init_mb_mgr_auto(m, &arch);
    const uint64_t need = IMB_FEATURE_AESNI | IMB_FEATURE_PCLMULQDQ | IMB_FEATURE_AVX512_SKX |
                          IMB_FEATURE_VAES | IMB_FEATURE_VPCLMULQDQ;
    if (imb_get_errno(m) != 0 || arch != IMB_ARCH_AVX512 || (m->features & need) != need) {
        free_mb_mgr(m);
        return NULL;
    }
    return m;
}

static inline size_t pv_imb_gcm_key_data_size(void) { return sizeof(struct gcm_key_data); }
static inline size_t pv_imb_gcm_context_size(void) { return sizeof(struct gcm_context_data); }

/* Expands a 32-byte key into `key_data` (pv_imb_gcm_key_data_size() bytes): round keys and
   GHASH key powers. */
static inline void pv_imb_gcm256_pre(void *mgr, const uint8_t *key, void *key_data) {
    IMB_AES256_GCM_PRE((IMB_MGR *)mgr, key, (struct gcm_key_data *)key_data);
}

/* One-shot AES-256-GCM with a 12-byte IV and a 16-byte tag. `ctx` is scratch
   (pv_imb_gcm_context_size() bytes) that the caller zeroes afterwards. Decryption writes
   the tag it computes to `tag_out`; the caller compares it in constant time. */
static inline void pv_imb_gcm256_enc(void *mgr, const void *key_data, void *ctx, uint8_t *out,
                                     const uint8_t *in, uint64_t len, const uint8_t *iv,
                                     const uint8_t *aad, uint64_t aad_len, uint8_t *tag_out) {
    IMB_AES256_GCM_ENC((IMB_MGR *)mgr, (const struct gcm_key_data *)key_data,
                       (struct gcm_context_data *)ctx, out, in, len, iv, aad, aad_len, tag_out, 16);
}
static inline void pv_imb_gcm256_dec(void *mgr, const void *key_data, void *ctx, uint8_t *out,
                                     const uint8_t *in, uint64_t len, const uint8_t *iv,
                                     const uint8_t *aad, uint64_t aad_len, uint8_t *tag_out) {
    IMB_AES256_GCM_DEC((IMB_MGR *)mgr, (const struct gcm_key_data *)key_data,
                       (struct gcm_context_data *)ctx, out, in, len, iv, aad, aad_len, tag_out, 16);
}
static inline int pv_imb_errno(void *mgr) { return imb_get_errno((IMB_MGR *)mgr); }
#endif
