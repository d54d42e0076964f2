#ifndef PHOTOVAULT_COPENSSL_SHIM_H
#define PHOTOVAULT_COPENSSL_SHIM_H
/* OpenSSL's libcrypto, used for the bulk AES-256-GCM of file chunks (PhotoVaultCrypto,
   AESGCMEngine.swift): its AES-NI/VAES code is about twice libsodium 1.0.18's speed here.
   And for MD5 in PhotoVaultPrivacy: not for security, but because the freedesktop thumbnail
   cache names each thumbnail after the MD5 of its file's URI. */
#include <openssl/crypto.h>
#include <openssl/evp.h>

/* Named wrappers for the GCM controls (the EVP_CTRL_* macros are not all imported). */
static inline int pv_gcm_get_tag(EVP_CIPHER_CTX *ctx, unsigned char *tag) {
    return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag);
}
static inline int pv_gcm_set_tag(EVP_CIPHER_CTX *ctx, const unsigned char *tag) {
    return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, (void *)tag);
}
#endif
