# Convenience targets; dev.sh is the entry point and needs nothing but bash and python3.
.PHONY: run test test-loaded bench reliability catalogue venv
run:         ; ./dev.sh run
test:        ; ./dev.sh test
test-loaded: ; ./dev.sh test-loaded
bench:       ; ./dev.sh bench
reliability: ; ./dev.sh reliability
catalogue:   ; ./dev.sh catalogue
venv:        ; ./dev.sh venv
