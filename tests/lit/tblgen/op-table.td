// Tests what cpc-tblgen writes for the runtime from a small dialect: one field per attribute
// name with its runtime type, each op's attributes with presence and default (an enum's by its
// case), the enums declared, and the enum attribute classes. (The leak check is off: TableGen
// keeps its records until exit.)
// RUN: env ASAN_OPTIONS=detect_leaks=0 cpc-tblgen -gen-cpc-op-table -I %mlir_include %s | FileCheck %s

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"

def Test_Dialect : Dialect {
  let name = "cpc";
  let cppNamespace = "::cpc";
}
def Test_Mode : I32EnumAttr<"Mode", "a test choice", [
    I32EnumAttrCase<"Off", 0, "off">, I32EnumAttrCase<"FastPath", 1, "fast_path">]> {
  let cppNamespace = "::cpc";
  let genSpecializedAttr = 0;
}
def Test_ModeAttr : EnumAttr<Test_Dialect, Test_Mode, "mode">;

def Test_AOp : Op<Test_Dialect, "a"> {
  let arguments = (ins I64Attr:$split_dim, DefaultValuedAttr<BoolAttr, "true">:$keep_going,
                       DefaultValuedAttr<Test_ModeAttr, "::cpc::Mode::FastPath">:$mode);
}
def Test_BOp : Op<Test_Dialect, "b"> {
  let arguments = (ins I64Attr:$split_dim, OptionalAttr<StrArrayAttr>:$mesh_axes);
}

// CHECK: CPC_ENUM_Mode(Off, "off")
// CHECK: CPC_ENUM_Mode(FastPath, "fast_path")
// CHECK: CPC_OP(A, "cpc.a", 0)
// CHECK: CPC_OP(B, "cpc.b", 0)
// CHECK: CPC_ATTR(splitDim, "split_dim", int64_t)
// CHECK-NEXT: CPC_ATTR(keepGoing, "keep_going", bool)
// CHECK-NEXT: CPC_ATTR(mode, "mode", Mode)
// CHECK-NEXT: CPC_ATTR(meshAxes, "mesh_axes", std::vector<std::string>)
// CHECK-NOT: CPC_ATTR(
// CHECK: enum class Mode : uint8_t { Off, FastPath };
// CHECK: static constexpr const char *names[] = { "off", "fast_path" };
// CHECK: CPC_ENUM_ATTR(ModeAttr, Mode)
// CHECK: CPC_OP_ATTR(A, splitDim, "split_dim", I64Attr, Required, "")
// CHECK-NEXT: CPC_OP_ATTR(A, keepGoing, "keep_going", BoolAttr, Defaulted, "true")
// CHECK-NEXT: CPC_OP_ATTR(A, mode, "mode", Test_ModeAttr, Defaulted, "fast_path")
// CHECK-NEXT: CPC_OP_ATTR(B, splitDim, "split_dim", I64Attr, Required, "")
// CHECK-NEXT: CPC_OP_ATTR(B, meshAxes, "mesh_axes", StrArrayAttr, Optional, "")
// CHECK: CPC_OP_ATTR_DEFAULT(A, keepGoing, true)
// CHECK-NEXT: CPC_OP_ATTR_DEFAULT(A, mode, Mode::FastPath)
