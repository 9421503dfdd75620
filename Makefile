# Builds the NIF into priv/ and the cmocka tests of the C core.
#   make            the NIF (what `mix compile` runs)
#   make ctest      C unit tests
#   make ctest-valgrind / ctest-asan   the same under valgrind / ASan+UBSan
#   make lint       cppcheck over our C
#   make fuzz-run   the libFuzzer target over the core for FUZZ_SECONDS (clang)
#   make test       C tests, then `mix test`

ERL ?= erl
ERTS_INCLUDE ?= $(shell $(ERL) -noshell -eval 'io:format("~s", [filename:join([code:root_dir(), "usr", "include"])]), halt().' 2>/dev/null)

CC ?= cc
WARN := -Wall -Wextra -Werror -Wshadow -Wpointer-arith -Wstrict-prototypes -Wmissing-prototypes
CFLAGS_BASE := -std=c11 -D_DEFAULT_SOURCE -O2 -g $(WARN)
CORE_SRC := $(sort $(wildcard c_src/core/*.c))
CORE_HDR := $(wildcard c_src/core/*.h)
# The NIF's files live in folders by job (c_src/nif/README.md); every folder
# is on the include path, so files include each other by bare name.
NIF_SRC := $(sort $(wildcard c_src/nif/*/*.c))
NIF_HDR := $(wildcard c_src/nif/*/*.h)
NIF_DIRS := $(sort $(patsubst %/,%,$(dir $(NIF_SRC) $(NIF_HDR))))
NIF_INC := -I c_src/core $(addprefix -I ,$(NIF_DIRS))
# Bare-name includes need every header name to be unique under c_src.
DUP_HDR := $(shell printf '%s\n' $(notdir $(CORE_HDR) $(NIF_HDR)) | sort | uniq -d)
$(if $(DUP_HDR),$(error header names must be unique under c_src (bare-name includes): $(DUP_HDR)))
TEST_SRC := $(sort $(wildcard c_src/test/test_*.c))
TEST_SUPPORT := $(filter-out $(TEST_SRC),$(wildcard c_src/test/*.c))
TEST_BIN := $(patsubst c_src/test/%.c,build/test/%,$(TEST_SRC))
ASAN_BIN := $(patsubst c_src/test/%.c,build/asan/%,$(TEST_SRC))
LIBS := -lbsd -ldl -lpthread

NIF_SO := priv/flame_on_client_nif.so

.PHONY: all ctest ctest-valgrind ctest-asan lint test clean fuzz fuzz-run nif-asan

# The NIF built with AddressSanitizer + UBSan, for running ExUnit against it
# (scripts/test): FLAME_ON_NIF=build/asan_nif/flame_on_client_nif with the
# sanitizer runtimes preloaded into the VM.
NIF_ASAN := build/asan_nif/flame_on_client_nif.so

CLANG ?= clang-14
FUZZ_SECONDS ?= 30
FUZZ_BIN := build/fuzz/fuzz_core

all: $(NIF_SO)

$(NIF_SO): $(CORE_SRC) $(NIF_SRC) $(CORE_HDR) $(NIF_HDR) Makefile
	@test -f "$(ERTS_INCLUDE)/erl_nif.h" || { echo "erl_nif.h not found under '$(ERTS_INCLUDE)': install erlang-dev (apt-get install erlang-dev)" >&2; exit 1; }
	@mkdir -p priv
	$(CC) $(CFLAGS_BASE) -fPIC -fvisibility=hidden -shared $(NIF_INC) -I "$(ERTS_INCLUDE)" \
		-o $@ $(CORE_SRC) $(NIF_SRC) $(LIBS)

nif-asan: $(NIF_ASAN)

$(NIF_ASAN): $(CORE_SRC) $(NIF_SRC) $(CORE_HDR) $(NIF_HDR) Makefile
	@mkdir -p build/asan_nif
	$(CC) $(CFLAGS_BASE) -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
		-fPIC -shared $(NIF_INC) -I "$(ERTS_INCLUDE)" -o $@ $(CORE_SRC) $(NIF_SRC) $(LIBS)

build/test/%: c_src/test/%.c $(CORE_SRC) $(CORE_HDR) $(TEST_SUPPORT) Makefile
	@mkdir -p build/test
	$(CC) $(CFLAGS_BASE) -O1 -I c_src/core -I c_src/test -o $@ $< $(TEST_SUPPORT) $(CORE_SRC) -lcmocka $(LIBS)

build/asan/%: c_src/test/%.c $(CORE_SRC) $(CORE_HDR) $(TEST_SUPPORT) Makefile
	@mkdir -p build/asan
	$(CC) $(CFLAGS_BASE) -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
		-I c_src/core -I c_src/test -o $@ $< $(TEST_SUPPORT) $(CORE_SRC) -lcmocka $(LIBS)

ctest: $(TEST_BIN)
	@set -e; for t in $(TEST_BIN); do echo "== $$t"; $$t; done

ctest-valgrind: $(TEST_BIN)
	@set -e; for t in $(TEST_BIN); do echo "== valgrind $$t"; \
		valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect $$t; done

ctest-asan: $(ASAN_BIN)
	@set -e; for t in $(ASAN_BIN); do echo "== asan $$t"; $$t; done

fuzz: $(FUZZ_BIN)

$(FUZZ_BIN): c_src/test/fuzz/fuzz_core.c $(CORE_SRC) $(CORE_HDR) Makefile
	@mkdir -p build/fuzz
	$(CLANG) -std=c11 -D_DEFAULT_SOURCE -g -O1 -Wall -Wextra -Werror -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=all -I c_src/core -o $@ $< $(CORE_SRC) $(LIBS)

# New inputs go to build/fuzz/corpus; the committed seeds are read only.
# The fuzzer's progress goes to build/fuzz/fuzz.log; its end (or, on a
# crash, the report and the input) is printed.
fuzz-run: $(FUZZ_BIN)
	@mkdir -p build/fuzz/corpus
	@$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -print_final_stats=1 \
		-artifact_prefix=build/fuzz/ build/fuzz/corpus c_src/test/fuzz/corpus > build/fuzz/fuzz.log 2>&1 \
		|| { tail -n 60 build/fuzz/fuzz.log; echo "fuzz: FAILED (input saved under build/fuzz/)"; exit 1; }
	@grep -E "^(Done|stat::)" build/fuzz/fuzz.log

lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,style,performance,portability \
		--std=c11 --inline-suppr --suppress=missingIncludeSystem $(NIF_INC) c_src/core c_src/nif c_src/test

test: ctest
	mix test

clean:
	rm -rf build priv/*.so
