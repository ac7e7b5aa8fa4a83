# tests/demo: a fast smoke test of the demo (tools/nsp_demo, TAP): 4 ranks,
# tiny sizes.
if NSP_COMM
TESTS += tests/demo/test_demo.sh
dist_noinst_SCRIPTS += tests/demo/test_demo.sh tests/demo/check_demo_json.py
endif
