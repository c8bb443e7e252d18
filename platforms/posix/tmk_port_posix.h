/* tmk_port_posix.h — what the POSIX port offers beyond platforms/tmk_port.h: a test hook. Only
 * tests include it. */
#ifndef TMK_PORT_POSIX_H
#define TMK_PORT_POSIX_H

/* With on != 0, tmk_port_udp_open fails as on a platform without UDP (the Wii case), so the
 * agent's automatic TCP fallback can be exercised. */
void tmk_port_test_fail_udp(int on);

#endif /* TMK_PORT_POSIX_H */
