// Tests that cpc-tblgen refuses one attribute name with two runtime types: the runtime keeps
// one field per name, so the second op must rename its attribute.
// RUN: not env ASAN_OPTIONS=detect_leaks=0 cpc-tblgen -gen-cpc-op-table -I %mlir_include %s 2>&1 | FileCheck %s

include "mlir/IR/OpBase.td"

def Test_Dialect : Dialect {
  let name = "cpc";
  let cppNamespace = "::cpc";
}
def Test_AOp : Op<Test_Dialect, "a"> { let arguments = (ins I64Attr:$axis); }
def Test_BOp : Op<Test_Dialect, "b"> { let arguments = (ins StrAttr:$axis); }

// CHECK: error: cpc-tblgen: attribute 'axis' of cpc.b is std::string, but cpc.a's is int64_t: rename one
