# src/common: status strings, logging, small shared utilities.
libnspcomm_planner_la_SOURCES += \
	src/common/status.c \
	src/common/log.c
noinst_HEADERS += \
	src/common/log.h
