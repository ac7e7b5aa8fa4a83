# src/transport (docs/design.md §3, §4): the internal transport interface, the UCX
# backend, bootstrap (TCP rendezvous, out-of-band callbacks), requests and the
# public communicator.
if NSP_COMM
libnspcomm_la_SOURCES += \
	src/transport/request.c \
	src/transport/transport.c \
	src/transport/registry.c \
	src/transport/rdv_wire.c \
	src/transport/rdv_id.c \
	src/transport/rdv_sock.c \
	src/transport/rdv_server.c \
	src/transport/rdv_client.c \
	src/transport/bootstrap_oob.c \
	src/transport/ucx.c \
	src/transport/ucx_report.c \
	src/transport/ucx_progress.c \
	src/transport/comm.c
noinst_HEADERS += \
	src/transport/transport.h \
	src/transport/request.h \
	src/transport/bootstrap.h \
	src/transport/rdv.h \
	src/transport/rdv_wire.h \
	src/transport/comm.h \
	src/transport/ucx_report.h \
	src/transport/ucx_progress.h
# The rendezvous's HMAC-SHA256 (OpenSSL libcrypto).
libnspcomm_la_CPPFLAGS += $(CRYPTO_CFLAGS)
libnspcomm_la_LIBADD += $(CRYPTO_LIBS)
endif
