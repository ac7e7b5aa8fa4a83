# src/common: status strings, logging, small shared utilities.
libnspcomm_planner_la_SOURCES += \
	src/common/status.c \
	src/common/log.c \
	src/common/version.c
noinst_HEADERS += \
	src/common/log.h \
	src/common/table.h

# A small JSON reader/writer (model/cluster files, plans, simulator output).
libnspcomm_planner_la_SOURCES += src/common/json.c
noinst_HEADERS += src/common/json.h
