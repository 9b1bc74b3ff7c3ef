//===- CpcBase.td - the cpc dialect ------------------------*- tablegen -*-===//
#ifndef CPC_BASE_TD
#define CPC_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Cpc_Dialect : Dialect {
  let name = "cpc";
  let cppNamespace = "::cpc";
  let summary = "Tensor ops of training graphs that cpc parallelizes";
  let description = [{
    Ops over statically shaped builtin tensors: what ViT/MAE training graphs exported from
    PyTorch through ONNX are made of, plus the device mesh and sharding attributes that the
    parallelization passes fill in.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 1;
}

// Every cpc value is a statically shaped tensor: the importer resolves all dims.
def Cpc_Tensor : StaticShapeTensorOf<[AnyType]>;
def Cpc_FloatTensor : StaticShapeTensorOf<[AnyFloat]>;
def Cpc_IntTensor : StaticShapeTensorOf<[AnyInteger]>;
def Cpc_IndexTensor : StaticShapeTensorOf<[I32, I64]>;
def Cpc_BoolTensor : StaticShapeTensorOf<[I1]>;

// Every cpc op verifies that its operands and results are no larger than the largest tensor
// cpc supports (support/CheckedSize.h), so that later size arithmetic cannot overflow.
def Cpc_TensorSizeLimit : NativeOpTrait<"TensorSizeLimit"> {
  let cppNamespace = "::cpc::OpTrait";
}

// Mixed precision (dialects/cpc/Autocast.h): ops that compute in the 16-bit type, and ops that
// stay in f32, as torch.autocast's lists; the others take the widest float operand type.
def Cpc_AutocastLowPrecision : NativeOpTrait<"AutocastLowPrecision"> {
  let cppNamespace = "::cpc::OpTrait";
}
def Cpc_AutocastFullPrecision : NativeOpTrait<"AutocastFullPrecision"> {
  let cppNamespace = "::cpc::OpTrait";
}

// Running the op again gives the same results, though it is not pure: its effects only order
// it (dialects/cpc/Replayable.h; activation recompute runs such ops twice).
def Cpc_Replayable : NativeOpTrait<"Replayable"> {
  let cppNamespace = "::cpc::OpTrait";
}

// What the runtime must know of an op beyond its kernel. The compiler asks op->hasTrait<>();
// the runtime and the kernels, which do not link MLIR, read the same traits from the op table
// that cpc-tblgen generates (dialects/cpc/tblgen, kernels/OpKind.h). C++: dialects/cpc/PlanTraits.h.
class Cpc_PlanTrait<string name> : NativeOpTrait<name> {
  let cppNamespace = "::cpc::OpTrait";
}
// Every rank of a group (the ranks that differ only along the op's mesh axes) issues it, in the
// same order as the others: a collective the schedule check matches across ranks.
def Cpc_GroupCollective : Cpc_PlanTrait<"GroupCollective">;
// A group collective that combines the members' values (a sum or a max): the runtime reduces in
// chunks through scratch.
def Cpc_CombiningCollective : Cpc_PlanTrait<"CombiningCollective">;
// A message to or from one peer rank along a mesh axis (pipeline stages).
def Cpc_PointToPoint : Cpc_PlanTrait<"PointToPoint">;
// Runs through the communicator's kernels (runtime/CollectiveKernels): it needs this rank's
// place in the mesh, whether or not it communicates.
def Cpc_RankDependent : Cpc_PlanTrait<"RankDependent">;
// Each result may take its operand's memory when the operand is not read afterwards.
def Cpc_MayRunInPlace : Cpc_PlanTrait<"MayRunInPlace">;

class Cpc_Op<string mnemonic, list<Trait> traits = []>
    : Op<Cpc_Dialect, mnemonic, !listconcat(traits, [Cpc_TensorSizeLimit])>;

#endif // CPC_BASE_TD
