# Convenience targets; dev.sh is the entry point and needs nothing but bash and python3.
.PHONY: run test bench reliability catalogue venv
run:         ; ./dev.sh run
test:        ; ./dev.sh test
bench:       ; ./dev.sh bench
reliability: ; ./dev.sh reliability
catalogue:   ; ./dev.sh catalogue
venv:        ; ./dev.sh venv
