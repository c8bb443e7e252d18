# Libraries the win32 port needs (read by platforms/CMakeLists.txt): Winsock 2.
set(TMK_PORT_LIBS ws2_32)
