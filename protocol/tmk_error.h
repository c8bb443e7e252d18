/* tmk_error.h — the one list of telemark error codes, shared by protocol, agent and relay.
 * Every function that can fail returns 0 (or a count) on success and a negative TMK_E* code
 * on failure; tmk_strerror() turns a code into a sentence for a user. */
#ifndef TMK_ERROR_H
#define TMK_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message). Values are stable: they appear in logs and the relay's API. */
#define TMK_ERRNO_MAP(X)                                                                 \
  X(EINVAL, -1, "invalid argument")                                                       \
  X(ETRUNC, -2, "packet is truncated: a field runs past the end of the input")            \
  X(EMAGIC, -3, "not a telemark packet (bad magic bytes)")                               \
  X(EVERSION, -4, "unsupported telemark protocol version")                               \
  X(ETYPE, -5, "unknown packet type")                                                     \
  X(ERECORD, -6, "unknown record tag in packet body")                                    \
  X(EVARINT, -7, "varint is longer than 10 bytes or overflows 64 bits")                  \
  X(ERANGE, -8, "value out of range for its field")                                      \
  X(ETOOBIG, -9, "length exceeds the protocol limit")                                     \
  X(ENEST, -10, "zone nesting is broken (close without open, too deep, or left open)")   \
  X(ELZ4, -11, "LZ4 body does not decompress to its declared size")                       \
  X(EBOMB, -12, "declared decompressed size exceeds the protocol limit")                  \
  X(ENOLZ4, -13, "packet is LZ4-compressed but this build has no LZ4")                    \
  X(ENOSPC, -14, "not enough room in the output buffer")                                  \
  X(ENOMEM, -15, "the memory handed in is too small")                                     \
  X(EFLAGS, -16, "unknown flag bits set in packet header")                                \
  X(ESOCKET, -17, "socket error")                                                          \
  X(ECLOSED, -18, "connection closed")                                                     \
  X(EAGAIN, -19, "resource temporarily unavailable, try again")                           \
  X(EIO, -20, "input/output error")                                                        \
  X(ESTATE, -21, "operation not valid in the current state")                              \
  X(ENOTFOUND, -22, "not found")                                                           \
  X(ECORRUPT, -23, "data is corrupt (checksum or structure mismatch)")                   \
  X(EACCESS, -24, "access denied (missing or wrong access token, or a foreign Origin)")   \
  X(ENOTSUP, -25, "not supported on this platform (the port leaves out sockets, files or threads)") \
  X(EAUTH, -26, "packet is not authenticated: no MAC, or a MAC that does not match the key")

typedef enum tmk_errno {
  TMK_OK = 0,
#define TMK__ERR_ENUM(name, value, msg) TMK_##name = (value),
  TMK_ERRNO_MAP(TMK__ERR_ENUM)
#undef TMK__ERR_ENUM
  TMK__ERR_LAST = -27
} tmk_errno;

/* Returns a static, human-readable sentence for a TMK_E* code ("unknown error" otherwise). */
const char* tmk_strerror(int err);
/* Returns the code's name without prefix, e.g. "ETRUNC" ("EUNKNOWN" otherwise). */
const char* tmk_err_name(int err);

#ifdef __cplusplus
}
#endif
#endif /* TMK_ERROR_H */
